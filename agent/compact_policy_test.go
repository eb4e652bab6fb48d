package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agent/runtime"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
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

// A child's model calls are checked on one check, on which the redactor
// skips what it found clean in the call before. Compaction puts a summary
// in place of messages found clean; the summary holds a secret (the
// summarizer wrote it), and the next request sends it redacted all the
// same.
func TestRedactorReadsWhatCompactionChanged(t *testing.T) {
	const secret = "sk-live-0123456789"
	pol, err := policy.New(policy.Redact("secrets", []string{secret}))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent []string // each request the model was sent, as JSON
	summaries := 0
	summarizer := provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
		mu.Lock()
		summaries++
		mu.Unlock()
		return provider.Response{Message: provider.AssistantMessage("summary: the user's key is " + secret), Usage: provider.Usage{Requests: 1, InputTokens: 10, OutputTokens: 5}}, nil
	})
	// The model calls note three times a run, one call a step, then
	// answers: a run adds eight messages.
	calls := 0
	model := provider.Func(func(_ context.Context, req provider.Request) (provider.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		b, _ := json.Marshal(req)
		sent = append(sent, string(b))
		results := 0
		for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role != provider.RoleUser; i-- {
			if req.Messages[i].Role == provider.RoleTool {
				results++
			}
		}
		u := provider.Usage{Requests: 1, InputTokens: 10, OutputTokens: 1}
		if results == 3 {
			return provider.Response{Message: provider.AssistantMessage("noted"), Usage: u}, nil
		}
		calls++
		return provider.Response{Message: provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{
			{ID: "call_" + strconv.Itoa(calls), Name: "note", Arguments: json.RawMessage(`{"n":` + strconv.Itoa(calls) + `}`)}}}, Usage: u}, nil
	})
	note := tool.Func{Def: tool.Definition{Name: "note", Description: "Notes.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) { return tool.Result{Content: "noted"}, nil }}
	r, err := agent.NewReact(model, agent.WithName("child"), agent.WithTools(note), agent.WithPolicy(pol),
		agent.WithCompaction(agent.Compaction{MaxMessages: 12, KeepTurns: 1, Summarizer: summarizer}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithPlace(context.Background(), "lead", 1) // a child: its requests are redacted
	for i := range 3 {
		if _, err := r.Run(ctx, agent.Input{Text: "note " + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if summaries == 0 {
		t.Fatal("the conversation was never compacted: the test tries nothing")
	}
	summarized := 0
	for i, req := range sent {
		if strings.Contains(req, secret) {
			t.Fatalf("request %d sent the secret: %s", i, req)
		}
		if strings.Contains(req, "summary: the user's key is "+policy.Redacted) {
			summarized++
		}
	}
	if summarized == 0 {
		t.Fatal("no request sent the summary")
	}
}
