// Package tool defines what an agent can call: the Tool interface, the
// Result a call produces, typed function tools whose argument schema is
// reflected from a Go type, the Registry that runs a model turn's calls,
// and interrupts, by which a tool asks a person before it goes on.
//
// # Tools
//
// A Tool has a Definition (name, description, JSON Schema of its
// arguments) and a Call method that turns a Call into a Result. Func makes
// one from a definition and a function; New makes one from a typed Go
// function, reflecting the argument schema from its input type with
// jsonschema.For and checking every call's arguments against it before
// decoding them; Must panics on a construction error, for tools built at
// package level. A tool that is not always offered implements Conditional;
// one with word for its agent at the start of a turn (a Note) implements
// Notifier.
// JSON Schema itself — compiling, validating, the bounds on a schema from
// outside the program — is package jsonschema's.
//
// # Errors
//
// Tools report two kinds of failure. What the model can act on — bad
// arguments, an unknown tool, a sub-agent that failed — is a Result with
// IsError set, which the model reads. What the program must act on —
// cancellation, an outage, a bug — is a Go error, and it ends the agent's
// run with that error.
//
// A plain error returned by a tool is of the second kind. Other agent kits
// show every tool error to the model; deputy follows Go instead, where an
// error goes to the caller: a database that is down or a token that
// expired reaches the program, which can retry, page someone or tell the
// user, instead of becoming text the model works around and the program
// never sees. When the model can fix what went wrong, the other choice is
// one word away: return Correctable(err) (or an error wrapping
// ErrInvalidArguments) and the Registry makes it an error Result; the run
// then ends only after agent.WithToolRetries failed steps in a row. A
// panic in a tool is recovered and becomes an error Result too (ErrPanic).
//
// # Registry
//
// NewRegistry holds a set of tools under unique names. Execute runs one
// model turn's calls, all at once or up to SetParallelism's bound, and returns
// their results in the order of the calls; a call to a name it does not
// hold is answered with ErrUnknownTool's message. WithCallHook puts a
// CallHook around every call a Registry runs under a context, for
// logging, metrics or policy.
//
// # Interrupts
//
// A tool may pause the whole run to ask a person: RequireApproval wraps a
// tool so that each call first asks for an Approval (its questions carry
// ApprovalReason, their answers match ApprovalSchema), and Ask asks any
// Question from inside a Call. The tool returns the *Interrupted error Ask
// gave it; the calls of the same model turn that did not ask finish, and
// every ancestor up to the top-level run stops, whose Run returns an error
// wrapping one *Interrupted with every question of the turn (each an
// Interrupt). Resume checks the Answers (ErrUnknownInterrupt,
// ErrAnsweredTwice, ErrExpired, ErrBadAnswer, ErrNothingSuspended) and
// returns the context under which the same turn, run again under the same
// journal (agent.WithJournal), continues: the calls that finished are
// replayed, and the call that asked gets its answer from Ask, or
// ErrCancelled for a question answered with Status Cancelled. An answer is
// used once, by the one call that asked; interrupt ids are derived from the
// call's place in the journaled turn, so they are the same on the resumed
// run whatever ids the provider gives its calls. A resumed top-level run
// that did not use an answer fails with ErrUnusedAnswer (UnusedAnswers
// lists them). A tool whose calls must run again on resume rather than be
// replayed implements Rerunner. A step a call must take before it asks —
// creating a remote task, reserving a seat — goes through Once, which runs
// it in the first run of the turn only and hands the recorded value to the
// runs after it.
package tool
