package subagent

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/benchcpu"
	"github.com/deputy-go/deputy/provider"
)

// BenchmarkDelegation measures one parent run with exactly one delegation:
// the parent's model calls the tool, a ReAct child built for the call
// answers {"status":"success","summary":"ok"}, the parent's model answers.
// Everything runs on the fake provider (looping, not recording), so what is
// measured is deputy's own work: two ReAct runs and three model calls, the
// registry's lookup and the validation of the arguments, building the child,
// the sub-agent tool around it, and, when validated, extracting and checking
// the answer against ReportSchema. Events are off.
//
//   - factory: FromFactory building a ReAct child per call, the realistic
//     one-shot case; the child gets the arguments' JSON text.
//   - validated: the same with WithReport.
//   - react: FromReact, the model giving the child's prompt and task.
//   - factory, token limit and factory, cost limit: factory under a lead's
//     WithTokenLimit, or WithCostLimit with prices, so that each of the
//     three model calls is reserved before it is made and the child gets
//     its share; the difference from factory, over three, is what the
//     reservation costs a call.
func BenchmarkDelegation(b *testing.B) {
	const answer = `{"status":"success","summary":"ok"}`
	factory := func(p provider.Provider) Factory {
		opts := []agent.Option{agent.WithName("child"), agent.WithSystemPrompt("You count files.")}
		return func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, opts...)
		}
	}
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": {Input: 1e-6, Output: 4e-6}})
	if err != nil {
		b.Fatal(err)
	}
	fromFactory := func(p provider.Provider) (*SubAgentTool, error) {
		return FromFactory("child", "Delegates a task.", factory(p))
	}
	cases := []struct {
		name string
		args string
		make func(p provider.Provider) (*SubAgentTool, error)
		lead []agent.Option
	}{
		{"factory", `{"task":"count the files"}`, func(p provider.Provider) (*SubAgentTool, error) {
			return FromFactory("child", "Delegates a task.", factory(p))
		}, nil},
		{"validated", `{"task":"count the files"}`, func(p provider.Provider) (*SubAgentTool, error) {
			return FromFactory("child", "Delegates a task.", factory(p), WithReport())
		}, nil},
		{"react", `{"system_prompt":"You count files.","task":"count the files"}`, func(p provider.Provider) (*SubAgentTool, error) {
			return FromReact("child", "Runs a sub-agent.", p, nil)
		}, nil},
		{"factory, token limit", `{"task":"count the files"}`, fromFactory, []agent.Option{agent.WithTokenLimit(1_000_000)}},
		{"factory, cost limit", `{"task":"count the files"}`, fromFactory, []agent.Option{agent.WithPrices(prices), agent.WithCostLimit(100)}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p := fake.NewProvider(
				fake.Call("child", c.args).For("lead"),
				fake.Text("There are 3 files.").For("lead"),
				fake.Text(answer).For("child"),
			).Loop().DontRecord()
			sub, err := c.make(p)
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
			for b.Loop() {
				lead.Reset()
				out, err := lead.Run(ctx, in)
				if err != nil {
					b.Fatal(err)
				}
				if out.ChildUsage.Requests != 1 || out.Messages[2].Content != answer {
					b.Fatalf("the delegation did not happen as scripted: %+v", out)
				}
			}
		})
	}
}

// factoryFanout is a lead whose first turn calls a FromFactory child n
// times, each child a ReAct agent whose model answers "done" after
// latency, and whose second turn answers.
func factoryFanout(b *testing.B, n int, latency time.Duration) *agent.React {
	b.Helper()
	calls := make([]provider.ToolCall, n)
	for i := range calls {
		calls[i] = provider.ToolCall{Name: "child", Arguments: json.RawMessage(fmt.Sprintf(`{"task":"part %d"}`, i))}
	}
	p := fake.NewProvider(
		fake.Calls(calls...).For("lead"),
		fake.Text("All parts done.").For("lead"),
		fake.Text("done").After(latency).For("child"),
	).Loop().DontRecord()
	sub, err := FromFactory("child", "Does one part.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(p, agent.WithName("child"))
	})
	if err != nil {
		b.Fatal(err)
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(sub))
	if err != nil {
		b.Fatal(err)
	}
	return lead
}

// BenchmarkParallelFactory measures the wall time of one model turn that
// calls a FromFactory tool 64 times, each child's model taking 50 ms,
// through an agent.NewReact with the default limits. The calls run in
// parallel, in one wave, so a batch should take about 50 ms; ms/batch is
// the wall time of one batch and x-latency its ratio to the child's 50 ms
// (under 1.2 is the goal).
func BenchmarkParallelFactory(b *testing.B) {
	const n, latency = 64, 50 * time.Millisecond
	lead := factoryFanout(b, n, latency)
	ctx := context.Background()
	var total time.Duration
	b.ReportAllocs()
	for b.Loop() {
		lead.Reset()
		start := time.Now()
		out, err := lead.Run(ctx, agent.Input{Text: "Do all parts."})
		total += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if out.ChildUsage.Requests != n {
			b.Fatalf("%d child requests, want %d", out.ChildUsage.Requests, n)
		}
	}
	perBatch := total / time.Duration(b.N)
	b.ReportMetric(float64(perBatch)/float64(time.Millisecond), "ms/batch")
	b.ReportMetric(float64(perBatch)/float64(latency), "x-latency")
}

// BenchmarkFanoutDefault measures one parent turn that calls a FromFactory
// child n times, in the default configuration (no bound on the calls of a
// turn), each child a ReAct agent whose model answers after 20 ms: the
// parent's two model calls, building and running n children, and folding
// their results. It reports ms/turn, the process's CPU per turn, and
// x-ideal: the wall time over the ideal, 20 ms plus the CPU the turn needs
// spread over the machine's cores. Wall time on a shared machine varies
// with its load; TestFanoutDefaultIdeal holds the same turn to its ideal on
// virtual time, with and without the default Admission.
func BenchmarkFanoutDefault(b *testing.B) {
	const latency = 20 * time.Millisecond
	for _, n := range []int{16, 64, 256, 1024} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			lead := factoryFanout(b, n, latency)
			ctx := context.Background()
			cpu0, _ := benchcpu.Now()
			var total time.Duration
			b.ReportAllocs()
			for b.Loop() {
				lead.Reset()
				start := time.Now()
				out, err := lead.Run(ctx, agent.Input{Text: "Do all parts."})
				total += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if out.ChildUsage.Requests != int64(n) {
					b.Fatalf("%d child requests, want %d", out.ChildUsage.Requests, n)
				}
			}
			cpu1, ok := benchcpu.Now()
			perTurn := total / time.Duration(b.N)
			b.ReportMetric(float64(perTurn)/float64(time.Millisecond), "ms/turn")
			if ok {
				cpu := (cpu1 - cpu0) / time.Duration(b.N)
				ideal := latency + cpu/time.Duration(runtime.GOMAXPROCS(0))
				b.ReportMetric(float64(cpu)/float64(time.Millisecond), "cpu-ms/turn")
				b.ReportMetric(float64(perTurn)/float64(ideal), "x-ideal")
			}
		})
	}
}
