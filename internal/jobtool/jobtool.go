// Package jobtool holds what the background-jobs tool says to a model and
// what a job hands back, shared by the in-process spawner and the
// runtimes that re-express it (through agent/runtime), so that the same
// model script drives both.
package jobtool

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
)

// MaxMessageBytes bounds the text of a message sent to a job, and
// MaxWaitSeconds a wait's timeout (as Params says to the model).
const (
	MaxMessageBytes = 16 << 10
	MaxWaitSeconds  = 600
)

// Params is the JSON Schema of the jobs tool's arguments.
const Params = `{"type":"object","properties":{
"action":{"type":"string","enum":["status","wait","send","cancel","list"],"description":"status of a job; wait for jobs to end and collect their results; send a job a message; cancel a job; list this run's jobs"},
"job_id":{"type":"string","maxLength":128,"description":"the job, for status, send and cancel (or one job to wait for)"},
"job_ids":{"type":"array","items":{"type":"string","maxLength":128},"maxItems":64,"description":"for wait: the jobs to wait for (default: every job not collected yet)"},
"mode":{"type":"string","enum":["all","any"],"description":"for wait: return when all of them have ended (default) or as soon as any has"},
"message":{"type":"string","maxLength":16384,"description":"for send: what the job should know or do; it reads it before its next step"},
"timeout_seconds":{"type":"number","minimum":0,"maximum":600,"description":"for wait: how long to wait at most (default 30)"}
},"required":["action"],"additionalProperties":false}`

// Usage is what a call with bad arguments is told to pass.
const Usage = `pass {"action":"status"|"wait"|"send"|"cancel"|"list","job_id":"…","job_ids":["…"],"mode":"all"|"any","message":"…","timeout_seconds":0-600}`

// Description is the jobs tool's description, spawnTool the name of the
// tool that starts jobs.
func Description(spawnTool string) string {
	return "Check on, wait for, message, cancel or list the background sub-agents started with " + spawnTool + ". " +
		"A job's result counts only once you have waited for it; jobs still running when you answer are cancelled. " +
		"A message reaches the job before its next step, never in the middle of one."
}

// Started is the result of a spawn that started job id, jobsTool the
// name of the tool that collects it.
func Started(id, jobsTool string) string {
	b, _ := json.Marshal(map[string]string{"job_id": id, "status": "running",
		"note": "A job id is not a result: collect it with " + jobsTool + " (wait) or cancel it before you answer."}) // strings only: it cannot fail
	return string(b)
}

// Partial is what a job cancelled (reason "") or stopped at one of its
// bounds (reason, quoted and clipped, says which) hands back: the step it reached, what it
// spent and its last words.
func Partial(id, reason string, step int, tokens int64, last string) string {
	var b strings.Builder
	if reason == "" {
		fmt.Fprintf(&b, "job %s cancelled", id)
	} else {
		fmt.Fprintf(&b, "job %s stopped at its limit (%s)", id, reason)
	}
	if step > 0 {
		fmt.Fprintf(&b, " at step %d", step)
	}
	fmt.Fprintf(&b, " (%d tokens spent)", tokens)
	if last != "" {
		b.WriteString("; partial report, its last words:\n" + last)
	} else {
		b.WriteString(": it had nothing to report yet.")
	}
	return b.String()
}

// Inbound is the user message that delivers messages to a job's agent
// at a step boundary, in the order they were sent; ids and texts pair
// up.
func Inbound(ids, texts []string) string {
	var b strings.Builder
	for i := range ids {
		if i > 0 {
			b.WriteString("\n\n")
		}
		fmt.Fprintf(&b, "Message %s from the agent that started you:\n%s", ids[i], texts[i])
	}
	return b.String()
}

// BadMessage says what is wrong with text as a message to job id, or ""
// when nothing is: a blank message or one past MaxMessageBytes is
// refused, with what to send instead.
func BadMessage(id, text string) string {
	switch {
	case strings.TrimSpace(text) == "":
		return fmt.Sprintf("the message to %s is blank: say what the job should know or do", id)
	case len(text) > MaxMessageBytes:
		return fmt.Sprintf("the message to %s has %d bytes, more than %d: send a shorter one", id, len(text), MaxMessageBytes)
	}
	return ""
}

// Ended is why job id, ended in state ("": found ended as the message
// went out), takes no more messages.
func Ended(id, state string) string {
	if state == "" {
		return id + " has ended: it takes no more messages; collect it with wait"
	}
	return id + " is " + state + ": it takes no more messages; collect it with wait"
}

// WaitTimeout is how long a wait whose timeout_seconds is seconds (nil:
// none given, def) waits; a timeout of 0 looks without waiting (a
// nanosecond). A timeout below 0, above MaxWaitSeconds or not a number
// is refused with what to send, never turned into a look or a wait
// without end.
func WaitTimeout(seconds *float64, def time.Duration) (time.Duration, string) {
	if seconds == nil {
		return def, ""
	}
	s := *seconds
	if math.IsNaN(s) || s < 0 || s > MaxWaitSeconds {
		return 0, fmt.Sprintf("timeout_seconds is %v: give 0 (look without waiting) to %d seconds", s, MaxWaitSeconds)
	}
	if s == 0 {
		return time.Nanosecond, ""
	}
	return max(time.Duration(s*float64(time.Second)), time.Nanosecond), ""
}
