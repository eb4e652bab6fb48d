package temporal

import (
	"errors"
	"fmt"
	"strconv"

	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	drun "github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
)

// reserveChange names the workflow version from which a run under a token
// limit reserves each model call before it is made, as the core does; a
// workflow started before it checks its limit after each reply, as it did.
const reserveChange = "deputy.reserve"

// replyCeiling bounds a reply under a token limit when Spec.MaxTokens does
// not, as in process: a bound every model accepts.
const replyCeiling = 4096

// budget is what a run under a token limit reserves before each model
// call, as the core's agent does: the call goes only if its estimated
// input and the output it may produce fit what the run has left, and what
// it may produce is sent as the request's MaxTokens. A child, whose answer
// its parent reads again, keeps room for that reading: its bound is half
// of what is left after the input. The call is a wrap-up turn, with no
// tools and a note to answer now, when a second call like it would not fit
// after it.
type budget struct {
	on       bool
	limit    int64
	readBack bool
	lastOut  int64 // the last reply's output tokens
	// reported is the input and output tokens the provider reported for
	// the last call, and reportedBytes the bytes of its request and reply:
	// the base of the next estimate.
	reported, reportedBytes int64
}

func newBudget(ctx workflow.Context, spec Spec, depth int) *budget {
	b := &budget{limit: spec.TokenLimit, readBack: depth > 0}
	b.on = spec.TokenLimit > 0 && workflow.GetVersion(ctx, reserveChange, workflow.DefaultVersion, 1) >= 1
	return b
}

// estimate is how many tokens req reads, as the core estimates it: a
// token per four bytes past what the provider last reported.
func (b *budget) estimate(req provider.Request) int64 {
	n := requestBytes(req)
	if b.reported > 0 && n >= b.reportedBytes {
		return b.reported + (n-b.reportedBytes+3)/4
	}
	return (n + 3) / 4
}

// worst is the most req may read: what the provider reported last and a
// token a byte of what was added since (estimate counts a token per four).
func (b *budget) worst(req provider.Request) int64 {
	n := requestBytes(req)
	if b.reported > 0 && n >= b.reportedBytes {
		return b.reported + n - b.reportedBytes
	}
	return n
}

func requestBytes(req provider.Request) int64 {
	n := len(req.System) + len(req.ResponseSchema)
	for _, m := range req.Messages {
		n += len(m.Content)
		for _, c := range m.ToolCalls {
			n += len(c.Name) + len(c.Arguments)
		}
	}
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	return int64(n)
}

// room is how many output tokens the run may spend after reading est.
func (b *budget) room(used, est int64) int64 {
	out := b.limit - used - est
	if b.readBack {
		out >>= 1
	}
	return out
}

// plan bounds req, the run's next model call, having used tokens so far:
// it returns the request to send and whether it is the run's wrap-up turn,
// or the error of a run with no room for another call.
func (b *budget) plan(spec Spec, req provider.Request, used int64) (provider.Request, bool, error) {
	if !b.on {
		return req, false, nil
	}
	est := b.estimate(req)
	out := b.room(used, est)
	wrapUp := false
	if out < est+2*max(b.lastOut, 1)+1 {
		wrapUp = true
		req.Tools = nil
		req.Messages = append(req.Messages[:len(req.Messages):len(req.Messages)], provider.UserMessage(tokenNote(used, b.limit)))
		est = b.estimate(req)
		out = b.room(used, est)
	}
	if out < 1 {
		return req, false, fmt.Errorf("agent %q used %d tokens, its limit is %d (%s), and the next model call, reading about %d tokens, would leave no room for a reply: raise %[4]s or give a smaller task",
			spec.Name, used, b.limit, spec.tokenSetting(), est)
	}
	req.MaxTokens = int(min(out, int64(cmp0(spec.MaxTokens, replyCeiling))))
	return req, wrapUp, nil
}

// tokenNote is the note of a wrap-up turn under a token limit, having
// used tokens of limit.
func tokenNote(used, limit int64) string {
	return "Budget note: you have used " + strconv.FormatInt(used, 10) + " of your " + strconv.FormatInt(limit, 10) +
		" tokens, and another step would pass the limit. This is your last reply, and no tools are available: answer now with what you have, " +
		"and say plainly what is unfinished (status \"partial\" if you report a status)."
}

// wrapUpReserveChange names the workflow version from which a run under
// a cost limit keeps back, as a step's children get their shares, what
// its wrap-up note costs besides what its next call reads, as in
// process: what it keeps and the share for its reply pay for its wrap-up
// however its children spend (their answers are read out of their own
// shares). A workflow started before it keeps back the call's input only.
const wrapUpReserveChange = "deputy.wrap-up-reserve"

// wrapUpNoteTokens is what the longer of the wrap-up notes a run under
// spec's limits may be sent weighs, estimated as the call's input is.
func wrapUpNoteTokens(spec Spec) int64 {
	n := len(wrapUpNote)
	if spec.TokenLimit > 0 {
		n = max(n, len(tokenNote(spec.TokenLimit, spec.TokenLimit)))
	}
	return (int64(n) + 3) / 4
}

// noteReply remembers what the provider reported for req and its reply.
func (b *budget) noteReply(req provider.Request, resp provider.Response) {
	b.lastOut = resp.Usage.OutputTokens
	if resp.Usage.InputTokens > 0 {
		n := requestBytes(req) + int64(len(resp.Message.Content))
		for _, c := range resp.Message.ToolCalls {
			n += int64(len(c.Name) + len(c.Arguments))
		}
		b.reported, b.reportedBytes = resp.Usage.InputTokens+resp.Usage.OutputTokens, n
	}
}

// share is the token limit of each of a step's n children: what the run
// has left after keeping back what its next call reads (keep), split in
// n+1 equal parts, one a child and one for the next call's reply, as the
// core splits it (run.Step.Share); at least floor tokens while the rest
// pays as much for every child and a token of reply; 0 without a limit.
func (b *budget) share(used, keep int64, n int, floor int64) int64 {
	if !b.on || n == 0 {
		return 0
	}
	left := max(b.limit-used-keep, 0)
	each := left / int64(n+1)
	if each < floor && left >= int64(n)*floor+1 {
		each = floor
	}
	return max(each, 1)
}

// shareFloorChange names the workflow version from which a run under a
// limit keeps back its wrap-up note under a token limit too, gives each
// child at least what reading the answer of a child too small to start
// costs (shareFloor), and reads that answer (unstartedLine) instead of
// the child's failure, as in process: ten children too small to start
// left the lead's wrap-up unpaid.
const shareFloorChange = "deputy.share-floor"

// shareFloorOutputChange names the workflow version from which a run
// under a cost limit raises its children's shares to the floor only when
// what is left after the floors pays for one output token of its own
// reply, as in process (run.WithShares); before it, any amount left
// sufficed, and the run could keep back less than a token of its reply.
// Asked only where the two differ.
const shareFloorOutputChange = "deputy.share-floor-output"

// unstartedLine is the result of a call whose child's share could not pay
// for its first model call, as in process.
const unstartedLine = drun.UnstartedLine

// unstartedLineChange names the workflow version from which what a run
// counts for reading the answer of a child too small to start (the floor
// of its shares, and of each call it runs of a reply it cannot pay to
// read all of) is unstartedLine, the answer it reads, where it counted
// 112 bytes (legacyRefusalBytes), about twice as many, and so could leave
// calls not run that it could pay to read.
const unstartedLineChange = "deputy.unstarted-line-floor"

// legacyRefusalBytes is what a workflow started before
// unstartedLineChange counts for reading the answer of a child too small
// to start, its id aside.
const legacyRefusalBytes = 112

// shareFloor is what reading the answer of one of calls whose child could
// not start costs, in tokens as the estimate counts them: the answer,
// refusal bytes long, and the call's id.
func shareFloor(calls []provider.ToolCall, refusal int) int64 {
	return drun.Floor(calls, refusal)
}

// unstarted reports whether err is the failure of a child that ended at
// its limit before any model call.
func unstarted(err error) bool {
	var app *sdktemporal.ApplicationError
	return errors.As(err, &app) && app.Type() == ErrTypeUsageLimit && usageOf(err).Requests == 0
}

func cmp0(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// unpaidChange names the workflow version from which a run under a limit
// bounds a call that offers tools so that the next call can read its
// reply again and wrap up (Reserve.Follow), and runs only the calls of a
// reply whose results what it has left can pay to read, in order, the
// others answered unpaidResult (or, where even that cannot be paid, left
// out of what the model reads), its next call being its wrap-up, as in
// process: before it, a lead under a tight limit could ask for children
// whose answers it then could not read, and end with usage_limit.
const unpaidChange = "deputy.unpaid-calls"

// unpaidResult is the result of a call its run could not pay to read the
// result of, as in process: the call is not run.
const unpaidResult = "not run: the budget could not pay for it"

// distinctIDsChange names the workflow version from which a run's model
// calls give a reply's call whose model named it as a call of the
// conversation an id of its own (ModelCall.DistinctIDs), as in process:
// before it, a model that numbers its calls from call_0 in every reply
// gave a lead's wait for a job the id of the spawn whose sub-agent still
// ran, and a client of the run's events could not tell the two apart.
const distinctIDsChange = "deputy.distinct-call-ids"
