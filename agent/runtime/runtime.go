// Package runtime holds the pieces of deputy's core that another runtime of
// its agents calls, so that its runs keep the meaning agent.React and
// subagent.SubAgentTool give theirs: the temporal module's workflows and
// activities use them rather than copies. A program that builds agents
// with packages agent and subagent needs nothing here.
//
// # Delegation depth and place
//
// WithDepth sets the depth a run's tool calls see when they run somewhere
// else than the run itself, and WithPlace its path in the tree too;
// WithShare bounds an agent run there by its share of the run's limits.
// CallUsage is the value of the per-call usage event such a runtime emits.
//
// # Guardrails
//
// NewGuards checks an agent's guardrails (policy.Guardrail) as
// agent.WithGuardrails does, each decision recorded as an event, and
// GuardNote is what an answer sent back for correction is told.
//
// # Sub-agent calls
//
// CapOutput cuts a child's answer as subagent.WithMaxOutputBytes does,
// CheckAnswer reads it against a JSON Schema as subagent.WithOutputSchema
// does, and CorrectionPrompt is what a child whose answer did not fit is
// told in its one corrective run.
//
// # Background children
//
// JobsTool is the tool a model acts on its background children with,
// JobStarted what a spawn in the background returns, JobMessages how the
// messages sent to a child reach it at a step boundary, and JobPartial
// what a cancelled child hands back, as subagent.WithBackground has them.
//
// # Compaction
//
// NewCompactor gives an agent.Compaction's pieces: Due says whether a
// conversation must be compacted, Plan where its older turns end,
// SummaryRequest asks a model for their summary, and Apply puts the summary
// in their place.
package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/answercheck"
	"github.com/deputy-go/deputy/internal/compact"
	"github.com/deputy-go/deputy/internal/guardrail"
	"github.com/deputy-go/deputy/internal/jobtool"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/internal/textcap"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// WithDepth returns ctx at the given delegation depth (agent.Depth), for
// code that runs a run's tool calls somewhere else, such as a worker of the
// temporal module running a call its workflow made at that depth: the
// sub-agent tools it calls see the depth, and hide themselves past their
// subagent.WithMaxDepth, as they would in the run itself.
func WithDepth(ctx context.Context, depth int) context.Context { return run.WithDepth(ctx, depth) }

// WithPlace returns ctx at the given depth and standing for the run whose
// path is path ("lead/researcher"), for code that runs that run's calls
// somewhere else: a policy's checks under it carry the path
// (policy.Check.Path), and an agent run under it is that run's child, its
// path path + "/" + its name, as a sub-agent's is in process.
func WithPlace(ctx context.Context, path string, depth int) context.Context {
	return run.WithPlace(ctx, path, depth)
}

// WithShare returns ctx under which the next agent run started, a
// sub-agent of a run elsewhere, spends at most tokens (0: no bound) and
// dollars (0: no bound) with its own sub-agents, as a child given its
// share of its parent's limits does in process (agent.WithTokenLimit,
// agent.WithCostLimit), its model calls priced at prices unless its agent
// has its own (agent.WithPrices; nil: none).
func WithShare(ctx context.Context, tokens int64, dollars float64, prices *provider.Prices) context.Context {
	if tokens > 0 || dollars > 0 {
		if tokens <= 0 {
			tokens = -1 // no bound
		}
		ctx, _ = run.ForRun(ctx, tokens, max(dollars, 0))
	}
	if prices != nil {
		ctx = run.WithPrices(ctx, prices)
	}
	return ctx
}

// Guards are one agent's guardrails, checked as agent.WithGuardrails
// checks them.
type Guards struct{ s *guardrail.Set }

// NewGuards returns gs as one agent's guardrails, or an error saying what
// is wrong with one of them, as agent.WithGuardrails refuses it.
func NewGuards(gs ...policy.Guardrail) (*Guards, error) {
	s, err := guardrail.Add(nil, "runtime.NewGuards", gs)
	if err != nil {
		return nil, err
	}
	return &Guards{s}, nil
}

// Check asks the guardrails of stage about text, in order, as the agent
// loop does: it returns the first failure (nil: all passed), what the
// checks spent and what that cost in US dollars, a judge's agent run
// under ctx priced at the prices of ctx (WithShare); retried says an
// answer is a correction already, so that a failure with Retry now fails
// the agent. Each decision is a policy.GuardrailEvent on the sink of ctx,
// at the place of ctx. An error is a check that could not decide; what
// was spent before it is returned with it.
func (g *Guards) Check(ctx context.Context, stage policy.Stage, text string, retried bool) (*policy.GuardrailError, provider.Usage, float64, error) {
	ctx, l := ledger.With(ctx)
	fail, spent, err := g.s.Check(ctx, stage, text, "", retried)
	var cost float64
	for _, m := range l.Entries() {
		cost += m.Cost
	}
	return fail, spent, cost, err
}

// GuardNote is what an agent whose answer a guardrail failed is told when
// the answer is sent back for correction.
func GuardNote(fail *policy.GuardrailError) string { return guardrail.Note(fail) }

// CallUsage is the value of the agent.UsageEvent a run emits after one
// model call: m as {"usage":[…]}, the call's TokenUsage as RUN_FINISHED
// gives it, its cost included when priced.
func CallUsage(m provider.ModelUsage) json.RawMessage { return ledger.CallJSON(m) }

// CapOutput cuts s to at most max bytes as a sub-agent's answer is cut
// (subagent.WithMaxOutputBytes): on a rune boundary, ending with a note
// that says how many bytes there were and how many are shown. s is
// returned as it is when it fits.
func CapOutput(s string, max int) string { return textcap.Cap(s, max) }

// CheckAnswer reads a child's answer as subagent.WithOutputSchema does: it
// finds the JSON value the answer holds (the whole answer, its last fenced
// block or its last object), refuses a repeated key, and validates the
// value against schema. It returns the JSON found ("" when none) and what
// is wrong with it, nil when it fits; err only when ctx ended first.
func CheckAnswer(ctx context.Context, schema *jsonschema.Schema, answer string) (found json.RawMessage, problem, err error) {
	v, err := answercheck.Check(ctx, schema, answercheck.DecodeAny, answer)
	if err != nil {
		return nil, nil, err
	}
	if v.Raw != "" {
		found = json.RawMessage(v.Raw)
	}
	return found, v.Problem, nil
}

// CorrectionPrompt is what a child whose answer did not fit schema is told
// in its one corrective run: the problem, cut to a few kilobytes, and the
// shape asked for (subagent.SchemaPrompt).
func CorrectionPrompt(schema json.RawMessage, problem error) string {
	return answercheck.Correction(subagent.SchemaPrompt(schema), problem)
}

// Compactor is the compaction an agent.Compaction describes, its zero
// fields set to their defaults, in the pieces a runtime of its own
// compacts a conversation with, as a React does.
type Compactor struct{ b compact.Bounds }

// NewCompactor returns c's pieces. c's Summarizer, SummaryModel and
// Summarize are not used: the runtime makes the summary's model call.
func NewCompactor(c agent.Compaction) Compactor {
	return Compactor{compact.Bounds{
		MaxTokens:       cmp.Or(c.MaxTokens, agent.DefaultCompactTokens),
		MaxMessages:     cmp.Or(c.MaxMessages, agent.DefaultCompactMessages),
		MaxBytes:        cmp.Or(c.MaxBytes, agent.DefaultCompactBytes),
		KeepTurns:       cmp.Or(c.KeepTurns, agent.DefaultKeepTurns),
		MaxSummaryBytes: cmp.Or(c.MaxSummaryBytes, agent.DefaultMaxSummaryBytes),
		SummaryPrompt:   cmp.Or(c.SummaryPrompt, agent.DefaultSummaryPrompt),
	}}
}

// Due reports whether hist, a conversation kept between runs, passes a
// bound, its tokens estimated at four bytes each; window is the model's
// context window in tokens (0: unknown).
func (k Compactor) Due(hist []provider.Message, window int64) bool { return k.b.Due(hist, window) }

// Plan returns how many of the first messages of hist a compaction folds
// into a summary: whole turns before the latest KeepTurns, fewer kept
// when they would fill more than half a bound, never an earlier summary
// alone. Zero means there is nothing to fold.
func (k Compactor) Plan(hist []provider.Message, window int64) int { return k.b.Plan(hist, window) }

// SummaryRequest returns the model request that asks for the summary of
// older, the messages Plan chose, for a model named model.
func (k Compactor) SummaryRequest(older []provider.Message, model string, window int64) provider.Request {
	return k.b.SummaryRequest(older, model, window)
}

// Apply returns msgs with its first cut messages replaced by summary (cut
// to MaxSummaryBytes): a user message that carries it and an assistant
// acknowledgement, or nothing when summary is empty. msgs is not changed.
func (k Compactor) Apply(msgs []provider.Message, cut int, summary string) []provider.Message {
	return k.b.Apply(msgs, cut, summary)
}

// JobsTool is the definition of the tool with which a model acts on its
// background children (subagent.JobsToolName: status, wait, send, cancel,
// list), as the in-process spawner offers it.
func JobsTool() provider.ToolDef {
	return provider.ToolDef{Name: subagent.JobsToolName, Description: jobtool.Description(subagent.SpawnToolName), Parameters: json.RawMessage(jobtool.Params)}
}

// JobStarted is what a spawn that started background job id returns.
func JobStarted(id string) string { return jobtool.Started(id, subagent.JobsToolName) }

// JobPartial is what a job cancelled (reason "") or stopped at a bound
// (reason says which) hands back: the step it reached, the tokens it
// spent and its last words.
func JobPartial(id, reason string, step int, tokens int64, last string) string {
	return jobtool.Partial(id, reason, step, tokens, last)
}

// JobMessages is the user message that hands a job's agent the messages
// sent to it, at a step boundary, in the order sent; ids and texts pair up.
func JobMessages(ids, texts []string) string { return jobtool.Inbound(ids, texts) }

// JobsUsage is what a call of JobsTool with bad arguments is told to pass.
const JobsUsage = jobtool.Usage

// JobMessageRefused says why text cannot be sent to job id, blank or
// past subagent.MaxMessageBytes, or "" when it can.
func JobMessageRefused(id, text string) string { return jobtool.BadMessage(id, text) }

// JobEnded is why job id, ended in state ("": found ended as the message
// went out), takes no more messages.
func JobEnded(id, state string) string { return jobtool.Ended(id, state) }

// JobWait is how long a wait of the jobs tool whose timeout_seconds is
// seconds (nil: none given) waits, or why the timeout is refused: below
// 0 or past the 600 seconds the tool allows. 0 is a look, a nanosecond.
func JobWait(seconds *float64) (time.Duration, string) {
	return jobtool.WaitTimeout(seconds, subagent.DefaultJobWait)
}
