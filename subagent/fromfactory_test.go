package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// Each call gets a fresh agent built from the call's context and
// arguments; nothing carries over from one call to the next.
func TestFromFactoryFreshAgentPerCall(t *testing.T) {
	p := fake.NewProvider(fake.Text("one").For("child"), fake.Text("two").For("child"))
	type built struct {
		depth int
		args  string
		a     *agent.React
	}
	var mu sync.Mutex
	var builds []built
	sub := must(FromFactory("child", "Delegates.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		a, err := agent.NewReact(p, agent.WithName("child"))
		mu.Lock()
		builds = append(builds, built{agent.Depth(ctx), string(args), a})
		mu.Unlock()
		return a, err
	}))(t)

	for i, args := range []string{`{"task":"first"}`, `{"task":"second"}`} {
		if _, err := callTool(context.Background(), sub, fmt.Sprint("call_", i), args); err != nil {
			t.Fatal(err)
		}
	}
	if len(builds) != 2 || builds[0].a == builds[1].a {
		t.Fatalf("builds = %+v, want two distinct agents", builds)
	}
	for i, b := range builds {
		if b.depth != 1 {
			t.Errorf("build %d: the factory's context is at depth %d, want 1 (the child's)", i, b.depth)
		}
	}
	if builds[0].args != `{"task":"first"}` || builds[1].args != `{"task":"second"}` {
		t.Errorf("the factory got arguments %q and %q", builds[0].args, builds[1].args)
	}
	reqs := p.RequestsFor("child")
	want := []provider.Message{provider.UserMessage("second")}
	if diff := cmp.Diff(want, reqs[1].Messages); diff != "" {
		t.Errorf("second child's request (-want +got):\n%s", diff)
	}
}

// closer is an agent that counts its closes.
type closer struct {
	agent.Func
	closed *atomic.Int32
}

func (c closer) Close() error { c.closed.Add(1); return nil }

// An agent that is an io.Closer is closed after the call, whatever the
// call's outcome, once per agent built.
func TestFromFactoryClosesAgent(t *testing.T) {
	tests := []struct {
		name       string
		run        agent.Func
		opts       []Option
		wantBuilds int32
	}{
		{"answer", func(context.Context, agent.Input) (agent.Output, error) {
			return agent.Output{Answer: "ok"}, nil
		}, nil, 1},
		{"failure", func(context.Context, agent.Input) (agent.Output, error) {
			return agent.Output{}, errors.New("broken")
		}, nil, 1},
		{"panic", func(context.Context, agent.Input) (agent.Output, error) {
			panic("bug")
		}, nil, 1},
		{"corrective retry", func(context.Context, agent.Input) (agent.Output, error) {
			return agent.Output{Answer: "not JSON"}, nil
		}, []Option{WithReport()}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var builds, closed atomic.Int32
			sub := must(FromFactory("child", "Delegates.", func(context.Context, json.RawMessage) (agent.Agent, error) {
				builds.Add(1)
				return closer{tt.run, &closed}, nil
			}, tt.opts...))(t)
			_, _ = callTool(context.Background(), sub, "call_1", `{"task":"x"}`)
			if builds.Load() != tt.wantBuilds || closed.Load() != tt.wantBuilds {
				t.Errorf("built %d, closed %d, want %d of each", builds.Load(), closed.Load(), tt.wantBuilds)
			}
		})
	}
}

// A factory error caused by the arguments reaches the model as an error
// it can correct, and the parent's run goes on; any other factory error is
// the program's and ends the parent's run.
func TestFromFactoryErrors(t *testing.T) {
	errNoDataset := errors.New("no dataset named \"sales\": use one of: costs, staff")
	tests := []struct {
		name        string
		err         error
		nilAgent    bool
		correctable bool
	}{
		{"marked correctable", tool.Correctable(errNoDataset), false, true},
		{"invalid arguments", fmt.Errorf("%w: %w", tool.ErrInvalidArguments, errNoDataset), false, true},
		{"other error", errNoDataset, false, false},
		{"no agent and no error", nil, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := must(FromFactory("child", "Delegates.", func(context.Context, json.RawMessage) (agent.Agent, error) {
				return nil, tt.err
			}))(t)

			_, err := callTool(context.Background(), sub, "call_1", `{"task":"x"}`)
			if err == nil || tool.IsCorrectable(err) != tt.correctable {
				t.Fatalf("Call error = %v, correctable %v; want an error, correctable %v", err, tool.IsCorrectable(err), tt.correctable)
			}
			if tt.err != nil && !errors.Is(err, errNoDataset) {
				t.Errorf("Call error %v does not wrap the factory's", err)
			}

			p := fake.NewProvider(fake.Call("child", `{"task":"x"}`).For("lead"), fake.Text("I will ask about costs.").For("lead"))
			lead := newReact(t, p, agent.WithName("lead"), agent.WithTools(sub))
			out, err := lead.Run(context.Background(), agent.Input{Text: "go"})
			if !tt.correctable {
				if err == nil {
					t.Errorf("the parent's run went on after a program error")
				}
				return
			}
			if err != nil {
				t.Fatalf("the parent's run failed: %v", err)
			}
			msgs := toolMessages(out.Messages)
			if len(msgs) != 1 || !msgs[0].IsError || !strings.Contains(msgs[0].Content, `no dataset named "sales"`) {
				t.Errorf("the parent's model read %+v, want an error result with the factory's message", msgs)
			}
		})
	}
}

// Calls run in parallel: every child's model call waits until all are
// in.
func TestFromFactoryParallel(t *testing.T) {
	const n = 8
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		arrived := 0
		all := make(chan struct{})
		p := fake.NewProvider(fake.Respond(func(ctx context.Context, _ provider.Request) (provider.Response, error) {
			mu.Lock()
			if arrived++; arrived == n {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
				return reply("together")
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			}
		}).For("child")).Loop()
		sub := must(FromFactory("child", "Delegates.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, agent.WithName("child"))
		}))(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { _, errs[i] = callTool(ctx, sub, fmt.Sprint("call_", i), `{"task":"meet"}`) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("call %d: %v (the calls did not run at the same time)", i, err)
			}
		}
	})
}

// FromFactory rejects a nil factory.
func TestFromFactoryNil(t *testing.T) {
	if _, err := FromFactory("child", "x", nil); err == nil {
		t.Error("FromFactory(nil factory) did not fail")
	}
}
