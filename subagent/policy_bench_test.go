package subagent

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/benchcpu"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/tool"
)

// BenchmarkDelegationPolicy measures a whole delegation with and without
// a policy of five rules on the lead: the lead's model calls a FromFactory
// child, whose model calls a plain tool and answers; the lead answers. So
// one delegation is two tool calls, one hand-off, two results and four
// model calls, every one of them checked by each rule (an allow list, a
// deny list, ask-before for a tool never called, a redactor of a value
// never sent, and a path limit for another tool). Events and tracing are
// off, the fake provider loops without recording. The difference in
// allocs/op between the two, over two tool calls, is what the policy
// costs a call; cpu-ns/op is the process's CPU time.
func BenchmarkDelegationPolicy(b *testing.B) {
	five, err := policy.New(
		policy.AllowTools("allowed", policy.AnyDepth, "child", "lookup"),
		policy.DenyTools("denied", policy.AnyDepth, "shell", "rm_*"),
		policy.AskBefore("ask", "pay_*"),
		policy.Redact("secrets", []string{"sk-live-0123456789"}, regexp.MustCompile(`AKIA[0-9A-Z]{16}`)),
		policy.PathUnder("sandbox", "write_file", "path", "/srv/work"),
	)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		lead []agent.Option
	}{{"none", nil}, {"five rules", []agent.Option{agent.WithPolicy(five)}}} {
		b.Run(c.name, func(b *testing.B) {
			p := fake.NewProvider(
				fake.Call("child", `{"task":"count the files"}`).For("lead"),
				fake.Text("There are 3 files.").For("lead"),
				fake.Call("lookup", `{"q":"files"}`).For("child"),
				fake.Text("3").For("child"),
			).Loop().DontRecord()
			lookup := tool.Func{Def: tool.Definition{Name: "lookup", Description: "Looks up.", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(context.Context, tool.Call) (tool.Result, error) { return tool.Result{Content: "found 3"}, nil }}
			childOpts := []agent.Option{agent.WithName("child"), agent.WithTools(lookup)}
			sub, err := FromFactory("child", "Delegates a task.", func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(p, childOpts...)
			})
			if err != nil {
				b.Fatal(err)
			}
			lead, err := agent.NewReact(p, append([]agent.Option{agent.WithName("lead"), agent.WithTools(sub)}, c.lead...)...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			in := agent.Input{Text: "How many files?"}
			b.ReportAllocs()
			defer benchcpu.Report(b)()
			for b.Loop() {
				lead.Reset()
				out, err := lead.Run(ctx, in)
				if err != nil {
					b.Fatal(err)
				}
				if out.ChildUsage.Requests != 2 || out.Messages[2].Content != "3" || len(out.Denials) != 0 {
					b.Fatalf("the delegation did not happen as scripted: %+v", out)
				}
			}
		})
	}
}
