package policy_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
)

const memoSecret = "sk-live-0123456789"

// conversation returns n clean messages, every third an assistant's tool
// call with arguments.
func conversation(n int) []provider.Message {
	msgs := make([]provider.Message, n)
	for i := range msgs {
		switch {
		case i%3 == 1:
			msgs[i] = provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{
				{ID: "c" + strconv.Itoa(i), Name: "lookup", Arguments: json.RawMessage(`{"q":"part ` + strconv.Itoa(i) + ` of the key: sk-live-01234"}`)}}}
		case i%3 == 2:
			msgs[i] = provider.Message{Role: provider.RoleTool, ToolCallID: "c" + strconv.Itoa(i-1), Content: "found part " + strconv.Itoa(i)}
		default:
			msgs[i] = provider.UserMessage("message " + strconv.Itoa(i) + " ends with sk-live-01234")
		}
	}
	return msgs
}

// A run's model calls are checked on one Check (the agent loop's), and
// the redactor skips what it found clean in the call before. Whatever
// changed since, however it changed, is scanned again: a message
// replaced or edited in place (as compaction rewrites the conversation),
// arguments written into, a secret completed by what was appended to a
// message that held half of it, a rewritten system prompt, a shorter
// conversation whose messages moved to other indices. Each change below
// puts a secret where a message found clean was, and the next call must
// not send it.
func TestRedactorRescansWhatChanged(t *testing.T) {
	p, err := policy.New(policy.Redact("secrets", []string{memoSecret}, regexp.MustCompile(`AKIA[0-9A-Z]{16}`)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := run.WithPlace(context.Background(), "lead/child", 1)
	for _, tc := range []struct {
		name   string
		change func(req *provider.Request) // writes into the request of the call before
	}{
		{"a message replaced", func(req *provider.Request) {
			req.Messages[3] = provider.UserMessage("the key is " + memoSecret)
		}},
		{"a message's text changed in place by compaction", func(req *provider.Request) {
			req.Messages[0].Content = "summary: the user gave " + memoSecret
		}},
		{"half a secret completed by what was appended", func(req *provider.Request) {
			req.Messages[6].Content += "56789"
		}},
		{"arguments written into in place", func(req *provider.Request) {
			// The half of the key becomes all of it, over the text before
			// it: the arguments keep their length and their bytes.
			args := req.Messages[4].ToolCalls[0].Arguments
			half := strings.Index(string(args), "sk-live-01234")
			copy(args[half+len("sk-live-01234")-len(memoSecret):], memoSecret)
		}},
		{"arguments of the same length rewritten in place", func(req *provider.Request) {
			args := req.Messages[7].ToolCalls[0].Arguments
			copy(args[len(`{"q":"`):], "AKIAABCDEFGHIJKLMNOP")
		}},
		{"the system prompt rewritten", func(req *provider.Request) {
			req.System = "use " + memoSecret
		}},
		{"a shorter conversation after compaction", func(req *provider.Request) {
			req.Messages = append([]provider.Message{provider.UserMessage("summary: " + memoSecret)}, req.Messages[5:]...)
		}},
		{"a message appended", func(req *provider.Request) {
			req.Messages = append(req.Messages, provider.UserMessage("and "+memoSecret))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := provider.Request{System: "You help.", Messages: conversation(12)}
			c := &policy.Check{Point: policy.BeforeModel}
			for range 3 { // the memo is made at the second call, and read at the third
				c.Request = &req
				if d := p.Decide(ctx, c); d.Verdict != policy.Allow {
					t.Fatalf("a clean conversation: %+v", d)
				}
			}
			tc.change(&req)
			sent := req
			c.Request = &sent
			d := p.Decide(ctx, c)
			if d.Verdict != policy.Rewrite {
				t.Fatalf("the changed request was let through: %+v", d)
			}
			if b, _ := json.Marshal(sent); strings.Contains(string(b), memoSecret) || strings.Contains(string(b), "AKIAABCDEFGHIJKLMNOP") {
				t.Fatalf("a secret was sent: %s", b)
			}
			// The secret is redacted in each later call too, the memo
			// holding what was rewritten as not clean.
			again := req
			c.Request = &again
			if d := p.Decide(ctx, c); d.Verdict != policy.Rewrite {
				t.Fatalf("the call after let the secret through: %+v", d)
			}
		})
	}
}

// A text one redactor found clean may hold another's secret: two
// redactors on one Check each scan for their own.
func TestRedactorsKeepTheirOwnMemo(t *testing.T) {
	first := policy.Redact("first", []string{memoSecret})
	second := policy.Redact("second", []string{"hunter2"})
	p, err := policy.New(first, second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := run.WithPlace(context.Background(), "lead/child", 1)
	req := provider.Request{Messages: conversation(12)}
	c := &policy.Check{Point: policy.BeforeModel, Request: &req}
	for range 3 {
		if out := p.Decide(ctx, c); out.Verdict != policy.Allow {
			t.Fatalf("a clean conversation: %+v", out)
		}
	}
	req.Messages[9].Content = "the password is hunter2"
	sent := req
	c.Request = &sent
	if out := p.Decide(ctx, c); out.Verdict != policy.Rewrite || out.Rule != "second" || strings.Contains(sent.Messages[9].Content, "hunter2") {
		t.Fatalf("%+v: sent %q", out, sent.Messages[9].Content)
	}
}

// A Check decided again under another context is placed there: its depth
// (the redactor lets the top-level agent's own request through, not a
// child's), its path, its event sink; and a place no rule or record read
// there is not the one before.
func TestCheckDecidedUnderAnotherContext(t *testing.T) {
	p, err := policy.New(policy.Redact("secrets", []string{memoSecret}))
	if err != nil {
		t.Fatal(err)
	}
	var s, leadSink sink
	lead := event.WithSink(run.WithPlace(context.Background(), "lead", 0), &leadSink)
	child := event.WithSink(run.WithPlace(context.Background(), "lead/child", 1), &s)
	req := provider.Request{Messages: []provider.Message{provider.UserMessage("the key is " + memoSecret)}}
	c := &policy.Check{Point: policy.BeforeModel, Request: &req}
	if out := p.Decide(lead, c); out.Verdict != policy.Allow || c.Path != "lead" {
		t.Fatalf("the lead's own request: %+v at %q", out, c.Path)
	}
	sent := req
	c.Request = &sent
	if out := p.Decide(child, c); out.Verdict != policy.Rewrite || c.Path != "lead/child" || c.Depth != 1 || strings.Contains(sent.Messages[0].Content, memoSecret) {
		t.Fatalf("the child's request: %+v at %q (depth %d), sent %q", out, c.Path, c.Depth, sent.Messages[0].Content)
	}
	if len(s.got) != 1 || len(leadSink.got) != 1 {
		t.Errorf("%d events on the child's sink and %d on the lead's, want 1 each", len(s.got), len(leadSink.got))
	}
	clean := provider.Request{Messages: []provider.Message{provider.UserMessage("nothing secret")}}
	c.Request = &clean
	if out := p.Decide(run.WithPlace(context.Background(), "lead/other", 1), c); out.Verdict != policy.Allow || c.Path == "lead/child" || c.Depth != 1 {
		t.Errorf("under a third context: %+v at %q (depth %d)", out, c.Path, c.Depth)
	}
}

// BenchmarkRedactConversation measures the redactor on the requests of a
// child's run of 40 model calls, its conversation growing by two
// messages (a tool call and its result of 1 KiB) a call: on one Check, as
// the agent loop decides them, and on a new Check each call, which has no
// memo and scans the whole conversation every time.
func BenchmarkRedactConversation(b *testing.B) {
	p, err := policy.New(policy.Redact("secrets", []string{memoSecret}, regexp.MustCompile(`AKIA[0-9A-Z]{16}`)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := run.WithPlace(context.Background(), "lead/child", 1)
	msgs := []provider.Message{provider.UserMessage("count the files")}
	var reqs []provider.Request
	for i := range 40 {
		reqs = append(reqs, provider.Request{System: "You count files.", Messages: msgs})
		id := "c" + strconv.Itoa(i)
		msgs = append(msgs, provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{{ID: id, Name: "lookup", Arguments: json.RawMessage(`{"q":"files ` + id + `"}`)}}},
			provider.Message{Role: provider.RoleTool, ToolCallID: id, Content: strings.Repeat("file.txt ", 114)})
	}
	for _, shared := range []bool{true, false} {
		name := "one check"
		if !shared {
			name = "a check a call"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c := &policy.Check{Point: policy.BeforeModel}
				for i := range reqs {
					if !shared {
						c = &policy.Check{Point: policy.BeforeModel}
					}
					req := reqs[i]
					c.Request = &req
					if p.Decide(ctx, c).Verdict != policy.Allow {
						b.Fatal("a clean request was rewritten")
					}
				}
			}
		})
	}
}
