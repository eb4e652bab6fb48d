package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

func spent(in, out int64) provider.Usage {
	return provider.Usage{InputTokens: in, OutputTokens: out, Requests: 1}
}

// The parent's ChildUsage is exactly the sum of its children's usage: a
// child that succeeds, one that fails after spending, one asked twice.
func TestChildUsageSums(t *testing.T) {
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			p := fake.NewProvider(
				fake.Calls(
					provider.ToolCall{Name: "good", Arguments: json.RawMessage(`{"task":"a"}`)},
					provider.ToolCall{Name: "child", Arguments: json.RawMessage(`{"task":"b"}`)},
					provider.ToolCall{Name: "retried", Arguments: json.RawMessage(`{"task":"c"}`)},
				).For("lead").WithUsage(spent(1, 1)),
				fake.Text("All done.").For("lead").WithUsage(spent(2, 2)),

				fake.Text("fine").For("good").WithUsage(spent(10, 2)),

				fake.Call("nope", `{}`).For("child").WithUsage(spent(20, 3)),
				fake.Error(errors.New("model down")).For("child"),

				fake.Text("not JSON").For("retried").WithUsage(spent(30, 4)),
				fake.Text(`{"status":"success","summary":"ok"}`).For("retried").WithUsage(spent(40, 5)),
			)
			good := must(FromFactory("good", "Answers.", func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(p, agent.WithName("good"))
			}))(t)
			failing := f.build(t, p, nil)
			retried := must(FromFactory("retried", "Answers in JSON.", func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(p, agent.WithName("retried"))
			}, WithReport()))(t)
			lead := newReact(t, p, agent.WithName("lead"), agent.WithTools(good, failing, retried))

			out, err := lead.Run(context.Background(), agent.Input{Text: "go"})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(provider.Usage{InputTokens: 100, OutputTokens: 14, Requests: 4}, out.ChildUsage); diff != "" {
				t.Errorf("ChildUsage (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(provider.Usage{InputTokens: 3, OutputTokens: 3, Requests: 2}, out.Usage); diff != "" {
				t.Errorf("Usage (-want +got):\n%s", diff)
			}
			if msgs := toolMessages(out.Messages); len(msgs) != 3 || msgs[0].IsError || !msgs[1].IsError || msgs[2].IsError {
				t.Errorf("tool results = %+v, want the second one failed", msgs)
			}
		})
	}
}

// A failed call's Result carries what the child spent, whichever channel
// the failure takes.
func TestFailedChildUsage(t *testing.T) {
	spent := spent(20, 3)
	tests := []struct {
		name    string
		replies []fake.Reply
		opts    []Option
		cancel  bool
		want    provider.Usage
	}{
		{"model error", []fake.Reply{fake.Call("nope", `{}`).WithUsage(spent), fake.Error(errors.New("down"))}, nil, false, spent},
		{"no JSON twice", []fake.Reply{fake.Text("a").WithUsage(spent), fake.Text("b").WithUsage(spent)}, []Option{WithReport()}, false, spent.Add(spent)},
		{"cancelled", []fake.Reply{fake.Call("nope", `{}`).WithUsage(spent), fake.Respond(func(ctx context.Context, _ provider.Request) (provider.Response, error) {
			<-ctx.Done()
			return provider.Response{}, ctx.Err()
		})}, nil, true, spent},
	}
	for _, f := range forms {
		for _, tt := range tests {
			t.Run(f.name+"/"+tt.name, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var replies []fake.Reply
				for _, r := range tt.replies {
					replies = append(replies, r.For("child"))
				}
				if tt.cancel {
					// The child's second model call cancels the call.
					replies[1] = fake.Respond(func(rctx context.Context, req provider.Request) (provider.Response, error) {
						cancel()
						<-rctx.Done()
						return provider.Response{}, rctx.Err()
					}).For("child")
				}
				p := fake.NewProvider(replies...)
				sub := f.build(t, p, nil, tt.opts...)
				res, err := callTool(ctx, sub, "call_1", `{"task":"x"}`)
				if err == nil {
					t.Fatal("the call did not fail")
				}
				if tt.cancel != !tool.IsCorrectable(err) {
					t.Errorf("error %v: correctable %v", err, tool.IsCorrectable(err))
				}
				if diff := cmp.Diff(tt.want, res.Usage); diff != "" {
					t.Errorf("Result.Usage (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// A parent's usage limit counts its children's usage: what is left for
// the parent's next call, the bound of its reply, is what the child left.
func TestParentLimitCountsChildren(t *testing.T) {
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			p := fake.NewProvider(
				fake.Call("child", `{"task":"x"}`).For("lead").WithUsage(spent(10, 10)),
				fake.Text("done").For("lead").WithUsage(spent(10, 10)),
				fake.Text("big answer").For("child").WithUsage(spent(150, 50)),
			)
			lead := newReact(t, p, agent.WithName("lead"), agent.WithTokenLimit(500), agent.WithTools(f.build(t, p, nil)))
			out, err := lead.Run(context.Background(), agent.Input{Text: "go"})
			if err != nil || out.Answer != "done" {
				t.Fatalf("error %v, answer %q; want the lead's answer", err, out.Answer)
			}
			reqs := p.RequestsFor("lead")
			if out.ChildUsage != spent(150, 50) {
				t.Errorf("ChildUsage = %v", out.ChildUsage)
			}
			if len(reqs) != 2 || reqs[1].MaxTokens <= 0 || reqs[1].MaxTokens > 500-20-200 {
				t.Errorf("the lead made %d calls, its last bounded at %d tokens; want 2, the last at most the %d the child left", len(reqs), reqs[len(reqs)-1].MaxTokens, 500-20-200)
			}
		})
	}
}
