package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
)

// A run's policy binds its compaction calls as it binds its own model
// calls: each summary request is checked before it is sent (here, a rule
// that rewrites it is what the summarizer reads), and a summary the
// policy denies is never asked for: the run fails with the *Denial.
func TestPolicyBindsCompaction(t *testing.T) {
	for _, deny := range []bool{false, true} {
		name := "rewritten"
		if deny {
			name = "denied"
		}
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			checked, summaries := 0, 0
			rule := policy.Func("summaries", func(_ context.Context, c *policy.Check) policy.Decision {
				if c.Point != policy.BeforeModel || !strings.HasSuffix(c.Request.CacheKey, "/summary") {
					return policy.Decision{} // a run's own request, not a summary's
				}
				mu.Lock()
				checked++
				mu.Unlock()
				if deny {
					return policy.Denied("no summaries")
				}
				req := *c.Request
				req.Messages = []provider.Message{provider.UserMessage(strings.ReplaceAll(req.Messages[0].Content, "note ", "NOTE "))}
				*c.Request = req
				return policy.Rewrote("shouted")
			})
			pol, err := policy.New(rule)
			if err != nil {
				t.Fatal(err)
			}
			summarizer := provider.Func(func(_ context.Context, req provider.Request) (provider.Response, error) {
				mu.Lock()
				summaries++
				mu.Unlock()
				if text := req.Messages[0].Content; strings.Contains(text, "note ") || !strings.Contains(text, "NOTE ") {
					t.Errorf("the summarizer read %q, not the request as the policy left it", text[:min(120, len(text))])
				}
				return provider.Response{Message: provider.AssistantMessage("summary"), Usage: provider.Usage{Requests: 1, InputTokens: 10, OutputTokens: 1}}, nil
			})
			r, err := agent.NewReact(&notesModel{}, agent.WithPolicy(pol),
				agent.WithCompaction(agent.Compaction{MaxMessages: 6, KeepTurns: 1, Summarizer: summarizer}))
			if err != nil {
				t.Fatal(err)
			}
			var runErr error
			for i := 1; i < 10 && runErr == nil; i++ {
				_, runErr = r.Run(context.Background(), agent.Input{Text: "note " + strings.Repeat("x", i)})
			}
			mu.Lock()
			defer mu.Unlock()
			if checked == 0 {
				t.Fatal("no summary was checked: the runs never compacted, and the test tries nothing")
			}
			if deny {
				var d *policy.Denial
				if summaries != 0 || !errors.As(runErr, &d) || d.Rule != "summaries" {
					t.Errorf("the summarizer was asked %d times, and the run failed with %v; want none, and the denial", summaries, runErr)
				}
				return
			}
			if runErr != nil || summaries != checked {
				t.Errorf("%d summaries checked, %d asked for (run error %v): want each asked for once checked", checked, summaries, runErr)
			}
		})
	}
}
