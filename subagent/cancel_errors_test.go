package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// Cancellation reaches the child and fails the call with an error
// wrapping context.Canceled, never a partial answer presented as success.
func TestCancellationStopsTheChild(t *testing.T) {
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := fake.NewProvider(fake.Text("too late").After(time.Hour).For("child"))
				sub := f.build(t, p, nil)
				ctx, cancel := context.WithCancel(context.Background())
				type outcome struct {
					res tool.Result
					err error
				}
				done := make(chan outcome, 1)
				go func() {
					res, err := callTool(ctx, sub, "call_1", `{"task":"x"}`)
					done <- outcome{res, err}
				}()
				synctest.Wait()
				cancel()
				o := <-done
				if !errors.Is(o.err, context.Canceled) || tool.IsCorrectable(o.err) {
					t.Errorf("error = %v, want the program's error wrapping context.Canceled", o.err)
				}
				if o.res.Content != "" || o.res.IsError {
					t.Errorf("result = %+v, want no content", o.res)
				}
			})
		})
	}
}

// Cancelling the parent's run cancels the child and ends the run.
func TestCancelParentRun(t *testing.T) {
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := fake.NewProvider(
					fake.Call("child", `{"task":"x"}`).For("lead"),
					fake.Text("never").For("lead"),
					fake.Text("too late").After(time.Hour).For("child"),
				)
				lead := newReact(t, p, agent.WithName("lead"), agent.WithTools(f.build(t, p, nil)))
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					_, err := lead.Run(ctx, agent.Input{Text: "go"})
					done <- err
				}()
				synctest.Wait()
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Errorf("parent's error = %v, want one wrapping context.Canceled", err)
				}
				if p.Remaining() != 1 {
					t.Errorf("the parent's model was called after the cancellation")
				}
			})
		})
	}
}

// A child that ignores its cancellation and answers anyway does not get
// to answer.
func TestChildIgnoringCancellation(t *testing.T) {
	stubborn := agent.Func(func(ctx context.Context, _ agent.Input) (agent.Output, error) {
		<-ctx.Done()
		return agent.Output{Answer: "a partial answer"}, nil
	})
	subs := []*SubAgentTool{
		must(FromAgent("child", "x", stubborn))(t),
		must(FromFactory("child", "x", func(context.Context, json.RawMessage) (agent.Agent, error) { return stubborn, nil }))(t),
	}
	for _, sub := range subs {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res, err := callTool(ctx, sub, "call_1", `{"task":"x"}`)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error = %v, want one wrapping context.Canceled", err)
		}
		if res.Content != "" {
			t.Errorf("content = %q, want none", res.Content)
		}
	}
}

// quotaError is a child's own typed error.
type quotaError struct{ left int }

func (e *quotaError) Error() string { return "quota exhausted" }

// A child's error stays in the chain, for errors.Is and errors.As, also
// through the parent's run.
func TestChildErrorInChain(t *testing.T) {
	failing := agent.Func(func(context.Context, agent.Input) (agent.Output, error) {
		return agent.Output{}, &quotaError{left: 0}
	})
	provErr := &provider.Error{Provider: "fake", StatusCode: 429, Kind: provider.KindRateLimit}
	subs := map[string]func(t *testing.T, p *fake.Provider) *SubAgentTool{
		"FromAgent": func(t *testing.T, _ *fake.Provider) *SubAgentTool {
			return must(FromAgent("child", "x", failing))(t)
		},
		"FromFactory": func(t *testing.T, _ *fake.Provider) *SubAgentTool {
			return must(FromFactory("child", "x", func(context.Context, json.RawMessage) (agent.Agent, error) { return failing, nil }))(t)
		},
		"FromReact": func(t *testing.T, p *fake.Provider) *SubAgentTool {
			return must(FromReact("child", "x", p, nil))(t)
		},
	}
	for name, build := range subs {
		t.Run(name, func(t *testing.T) {
			p := fake.NewProvider(
				fake.Call("child", `{"task":"x"}`).For("lead"),
				fake.Error(provErr).For("child"),
			)
			sub := build(t, p)
			lead := newReact(t, p, agent.WithName("lead"), agent.WithTools(sub), agent.WithToolRetries(0))
			_, err := lead.Run(context.Background(), agent.Input{Text: "go"})
			if !errors.Is(err, ErrChildFailed) || !errors.Is(err, agent.ErrToolRetries) {
				t.Errorf("parent's error = %v, want ErrToolRetries wrapping ErrChildFailed", err)
			}
			var qe *quotaError
			var pe *provider.Error
			if !errors.As(err, &qe) && !errors.As(err, &pe) {
				t.Errorf("parent's error %v lost the child's typed error", err)
			}
		})
	}
}

// A panicking child becomes an error result; the parent's run goes on
// and its model reads a concise message.
func TestPanickingChild(t *testing.T) {
	boom := func() (agent.Output, error) { panic("index out of range [3] with length 3") }
	panicky := agent.Func(func(context.Context, agent.Input) (agent.Output, error) { return boom() })
	subs := map[string]func(t *testing.T, p *fake.Provider) *SubAgentTool{
		"FromAgent": func(t *testing.T, _ *fake.Provider) *SubAgentTool {
			return must(FromAgent("child", "x", panicky))(t)
		},
		"FromFactory, the agent": func(t *testing.T, _ *fake.Provider) *SubAgentTool {
			return must(FromFactory("child", "x", func(context.Context, json.RawMessage) (agent.Agent, error) { return panicky, nil }))(t)
		},
		"FromFactory, the factory": func(t *testing.T, _ *fake.Provider) *SubAgentTool {
			return must(FromFactory("child", "x", func(context.Context, json.RawMessage) (agent.Agent, error) { panic("factory bug") }))(t)
		},
		"FromReact, the provider": func(t *testing.T, p *fake.Provider) *SubAgentTool {
			p.Add(fake.Respond(func(context.Context, provider.Request) (provider.Response, error) { panic("adapter bug") }).For("child"))
			return must(FromReact("child", "x", p, nil))(t)
		},
		"WithRender": func(t *testing.T, p *fake.Provider) *SubAgentTool {
			p.Add(fake.Text("fine").For("child"))
			return must(FromReact("child", "x", p, nil, WithRender(func(context.Context, Outcome) (string, error) { panic("render bug") })))(t)
		},
	}
	for name, build := range subs {
		t.Run(name, func(t *testing.T) {
			p := fake.NewProvider(
				fake.Call("child", `{"task":"x"}`).For("lead"),
				fake.Text("I will do it myself.").For("lead"),
			)
			lead := newReact(t, p, agent.WithName("lead"), agent.WithTools(build(t, p)))
			out, err := lead.Run(context.Background(), agent.Input{Text: "go"})
			if err != nil {
				t.Fatalf("the parent's run failed: %v", err)
			}
			if out.Answer != "I will do it myself." {
				t.Errorf("answer = %q", out.Answer)
			}
			msgs := toolMessages(out.Messages)
			if len(msgs) != 1 || !msgs[0].IsError || !strings.Contains(msgs[0].Content, "panicked") ||
				len(msgs[0].Content) > 200 || strings.Contains(msgs[0].Content, "goroutine") {
				t.Errorf("the parent's model read %+v, want a short error result", msgs)
			}
		})
	}
}

// WithTimeout bounds a call; running over is an error the model can act
// on.
func TestChildTimeout(t *testing.T) {
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := fake.NewProvider(fake.Text("too late").After(time.Hour).For("child"), fake.Text("quick").For("child"))
				sub := f.build(t, p, nil, WithTimeout(time.Minute))
				start := time.Now()
				_, err := callTool(context.Background(), sub, "call_1", `{"task":"x"}`)
				if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || !tool.IsCorrectable(err) {
					t.Errorf("error = %v, want a correctable ErrTimeout wrapping context.DeadlineExceeded", err)
				}
				if d := time.Since(start); d != time.Minute {
					t.Errorf("the call took %v, want the timeout", d)
				}
				res, err := callTool(context.Background(), sub, "call_2", `{"task":"x"}`)
				if err != nil || res.Content != "quick" {
					t.Errorf("next call = (%q, %v)", res.Content, err)
				}
			})
		})
	}
	if _, err := FromAgent("x", "x", agent.Func(nil), WithTimeout(0)); err == nil {
		t.Error("WithTimeout(0) accepted")
	}
}
