package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example runs to its answer: the message is queued while the child
// is in its first step, and the child's answer takes it into account.
func TestBackground(t *testing.T) {
	var out strings.Builder
	// On a bubble's clock, so that the message comes during the child's
	// first step however loaded the machine is.
	synctest.Test(t, func(t *testing.T) {
		if err := run(context.Background(), &out); err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
	})
	got := regexp.MustCompile(`(job|msg)_[0-9a-z]{10,}`).ReplaceAllString(out.String(), "${1}_ID")
	want := `tool result: {"job_id":"job_ID","note":"A job id is not a result: collect it with subagent_jobs (wait) or cancel it before you answer.","status":"running"}
tool result: {"job_id":"job_ID","message_id":"msg_ID","state":"queued","seq":1}
tool result: {"job_id":"job_ID","agent":"subagent","task":"Count the words of the report.","state":"running","step":1,"usage":{"input_tokens":0,"output_tokens":0,"requests":0},"messages":[{"job_id":"job_ID","message_id":"msg_ID","state":"queued","seq":1}]}
tool result: 412 words, headings left out as asked.
answer: The report has 412 words, headings aside.
tokens: lead 425, child 90
`
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("output (-want +got):\n%s", d)
	}
}
