// Package policy is tree-wide policy: rules set once, at the top of a
// run, that see and decide on everything the whole delegation tree below
// it does, and that no sub-agent can shed or loosen.
//
//	p, err := policy.New(
//		policy.DenyTools("no-shell", policy.AnyDepth, "shell"),
//		policy.AskBefore("approve-payments", "pay_*"),
//		policy.Redact("secrets", []string{userAPIKey}),
//	)
//	lead, err := agent.NewReact(model, agent.WithTools(researcher), agent.WithPolicy(p))
//
// # What it sees
//
// A Policy is asked at four points (Point), each with a Check that says
// where in the tree it is (Path, Depth, RunID, Owner, Thread):
// BeforeTool, every tool call any agent of the tree makes, sub-agent tools
// included; BeforeDelegation, every hand-off to a sub-agent, in every form
// (FromAgent, FromFactory, FromReact, a roster member or fork of the spawn
// tool, a background job, a remote agent), with the task and context the
// child is given; AfterResult, every result before the model that asked
// reads it, a child's answer included; BeforeModel, every model call,
// compaction's summaries included, with the request to be sent.
//
// # What it decides
//
// Each Rule returns a Decision: Allow (no objection), Deny (the model
// reads why; the Go caller finds a *Denial in the tool.Result, in
// agent.Output.Denials and, for a model call, in the run's error), Ask (a
// person approves first, through the interrupt of tool.RequireApproval,
// asked once per call in a journaled turn), or Rewrite (the rule changed
// the Check: redacted arguments, a task, a result, a request). Rules are
// asked in order; the first Deny wins over any Ask, an Ask over a
// Rewrite. Every decision is a CUSTOM event named EventName and an event
// of that name on the OpenTelemetry span of the call it was made in; an
// Ask is recorded once, when its question is put, and the person's answer
// once more, as an allow or a deny whose "answer" says what they said.
//
// # Only narrower
//
// A policy rides the run's context (With; agent.WithPolicy calls it), so
// it crosses every agent.Agent boundary, agents deputy does not own
// included. With adds to the policy a context carries and nothing takes
// from it: a sub-agent given a policy of its own is bound by its parent's
// and its own. A policy that would allow what the one it extends forbids
// (an allow list wider than the parent's) is refused with a *Widening, not
// silently narrowed: by Narrow when it is made; by With when it is put on
// a context that carries the one it extends; by agent.NewReact when a
// sub-agent known then (a resident, a FromReact child, a roster member,
// the spawn tool's forks given it through subagent.WithReactOptions) has
// one; else by the child's run, before any model call, which its parent's
// model reads as a failed hand-off (code "policy_widens"): so a child that
// a function builds at its call (subagent.FromFactory, FromScoped), or one
// whose parent has its policy by the context only, is refused when it
// runs. Make a child's policy with Narrow of its parent's.
//
// # Ready-made rules
//
// AllowTools and DenyTools (by name or "*" pattern, per depth), AskBefore,
// Redact (named values and patterns), PathUnder (a path argument must stay
// under a directory). Func makes a rule of a function.
//
// # Guardrails
//
// A Guardrail checks one agent's input (Input) or final answer (Output),
// with a Go function or a judge model (subagent.Judge). It is the agent's
// own and is not inherited: agent.WithGuardrails guards a run's input and
// answer, subagent.WithGuardrails the task a sub-agent is handed and the
// answer it brings back, in every form of delegation. A failed check
// trips (the run stops with a *GuardrailError, up to the top, and no
// model reads what tripped it) or, with Retry, sends the answer back once
// for correction, as a schema violation is. Each decision is a CUSTOM
// event named GuardrailEvent and a span event of that name.
//
// # Policy, guardrails and hooks
//
// A policy binds a whole tree, decides on every call, hand-off, result
// and model call in it, and cannot be left behind by delegation.
// Guardrails check what goes into and comes out of one agent. Lifecycle
// hooks (tool.CallHook, subagent.WithOutcome, event sinks) observe one
// agent or one tool and cannot stop anything.
package policy
