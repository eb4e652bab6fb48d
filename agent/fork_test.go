package agent_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
)

// TestContextForkSendsALongParentAsItIs gives a context fork, under the
// default compaction, a parent's request past each of compaction's
// bounds: the parent sent it, so the fork sends it again byte for byte,
// where the provider's cache holds it, and pays for no summary; only a
// request that would not fit the fork's context window is compacted.
func TestContextForkSendsALongParentAsItIs(t *testing.T) {
	many := make([]provider.Message, 0, agent.DefaultCompactMessages+200)
	for i := range cap(many) / 2 {
		many = append(many, provider.UserMessage(fmt.Sprintf("question %d", i)), provider.AssistantMessage(fmt.Sprintf("answer %d", i)))
	}
	big := strings.Repeat("the survey's figures in full. ", agent.DefaultCompactBytes/29+1000)
	long := []provider.Message{
		provider.UserMessage("read this"), provider.AssistantMessage("done"),
		provider.UserMessage(big), provider.AssistantMessage("read"),
	}
	for _, tt := range []struct {
		name    string
		msgs    []provider.Message
		opts    []agent.Option
		compact bool // the request passes the fork's window
	}{
		{"more messages than MaxMessages", many, nil, false},
		{"more bytes and tokens than MaxBytes and MaxTokens", long, nil, false},
		{"more tokens than the fork's window", long, []agent.Option{agent.WithContextWindow(200_000)}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			parent := &provider.Request{System: "You lead.", Messages: tt.msgs, CacheKey: "lead"}
			p := fake.NewProvider(fake.Text("the summary"), fake.Text("ok"))
			fork, err := agent.NewReact(p, append([]agent.Option{agent.WithName("fork")}, tt.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			out, err := fork.Run(t.Context(), agent.Input{Text: "your task", Fork: parent})
			if err != nil {
				t.Fatal(err)
			}
			reqs := p.Requests()
			if tt.compact {
				if out.Compactions != 1 || len(reqs) != 2 {
					t.Fatalf("%d compactions, %d requests: want the fork's request past its window compacted, one summary and one call", out.Compactions, len(reqs))
				}
				return
			}
			if out.Compactions != 0 || len(reqs) != 1 {
				t.Fatalf("%d compactions, %d requests: want the parent's request sent as it is, in one call", out.Compactions, len(reqs))
			}
			r := reqs[0].Request
			n := len(tt.msgs)
			if r.System != parent.System || r.CacheKey != parent.CacheKey || r.SharedPrefix != n || len(r.Messages) != n+1 ||
				!reflect.DeepEqual(r.Messages[:n], tt.msgs) || r.Messages[n].Content != "your task" {
				t.Fatalf("the fork sent system %q, key %q, %d shared of %d messages: want the parent's %d messages, then its task",
					r.System, r.CacheKey, r.SharedPrefix, len(r.Messages), n)
			}
		})
	}
}
