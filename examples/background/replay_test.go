package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
	"github.com/google/go-cmp/cmp"
)

// go test replays testdata/background.jsonl; go test -deputy.record='*'
// records it again from the example's scripted model.
var record = cassette.RecordFlag()

// ids are the job and message ids, random in every run.
var ids = regexp.MustCompile(`(job|msg)_[0-9a-z]{10,}`)

// anonymous leaves the random job and message ids out of a request's key
// (cassette.WithNormalize): the lead reads them in its tool results and
// names the job in its calls, so the same request differs in them from
// one run to the next.
func anonymous(req *provider.Request) {
	msgs := slices.Clone(req.Messages)
	for i := range msgs {
		msgs[i].Content = ids.ReplaceAllString(msgs[i].Content, "${1}_ID")
		calls := slices.Clone(msgs[i].ToolCalls)
		for k := range calls {
			calls[k].Arguments = json.RawMessage(ids.ReplaceAll(calls[k].Arguments, []byte("${1}_ID")))
		}
		msgs[i].ToolCalls = calls
	}
	req.Messages = msgs
}

// onThisRun has the cassette stand in for the example's scripted model.
// The model reads the requests anonymous made of them, so a call of its
// that names a job names job_ID, recorded as such: it is given the job
// this run started (the latest receipt the lead read). When pace, the
// calls take the time the script gives them, so that the message comes
// during the child's first step as it did when recorded.
func onThisRun(p provider.Provider, pace bool) provider.Provider {
	return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		tools := 0
		job := ""
		for _, m := range req.Messages {
			if m.Role != provider.RoleTool {
				continue
			}
			tools++
			var r struct {
				JobID string `json:"job_id"`
			}
			if json.Unmarshal([]byte(m.Content), &r) == nil && r.JobID != "" {
				job = r.JobID
			}
		}
		switch {
		case !pace:
		case agent.Name(ctx) == "lead" && tools == 1:
			time.Sleep(50 * time.Millisecond)
		case agent.Name(ctx) == subagent.DefaultForkName && tools == 0:
			time.Sleep(200 * time.Millisecond)
		}
		resp, err := p.Complete(ctx, req)
		calls := slices.Clone(resp.Message.ToolCalls)
		for i := range calls {
			calls[i].Arguments = json.RawMessage(bytes.ReplaceAll(calls[i].Arguments, []byte("job_ID"), []byte(job)))
		}
		resp.Message.ToolCalls = calls
		return resp, err
	})
}

// The example replayed from the recording of its own scripted run prints
// the same tool results and figures, with no model, and its tree holds
// the one child it ran in the background. The printed job and message
// ids, random in every run, are compared as job_ID and msg_ID.
func TestReplaysItsRecording(t *testing.T) {
	p := cassette.Open(t, "testdata/background.jsonl", script(), *record, cassette.WithNormalize(anonymous))
	model := onThisRun(p, *record == "")
	tree := subagent.NewTree(nil)
	var out strings.Builder
	// On a bubble's clock, as the example's own test runs.
	synctest.Test(t, func(t *testing.T) {
		if err := demo(context.Background(), &out, model, tree); err != nil {
			t.Fatalf("demo: %v\n%s", err, out.String())
		}
	})
	got := ids.ReplaceAllString(out.String(), "${1}_ID")
	want := `tool result: {"job_id":"job_ID","note":"A job id is not a result: collect it with subagent_jobs (wait) or cancel it before you answer.","status":"running"}
tool result: {"job_id":"job_ID","message_id":"msg_ID","state":"queued","seq":1}
tool result: {"job_id":"job_ID","agent":"subagent","task":"Count the words of the report.","state":"running","step":1,"usage":{"input_tokens":0,"output_tokens":0,"requests":0},"messages":[{"job_id":"job_ID","message_id":"msg_ID","state":"queued","seq":1}]}
tool result: 412 words, headings left out as asked.
answer: The report has 412 words, headings aside.
tokens: lead 425, child 90
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if *record == "" && p.LiveCalls() != 0 {
		t.Errorf("the replay called the model %d times", p.LiveCalls())
	}

	tr := treetest.New(t, tree)
	tr.Nodes("*").Count(1)
	tr.Nodes(subagent.DefaultForkName).WithArgs(`{"task":"Count the words of the report.","background":true}`).Count(1).
		Each(treetest.State(subagent.StateSucceeded), treetest.AnswerContains("headings left out"), treetest.MaxTokens(90))
	const dump = `subagent succeeded {"task":"Count the words of the report.","background":true} → "412 words, headings left out as asked." (80+10 tokens)
`
	if diff := cmp.Diff(dump, tr.Dump()); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}
