package subagent

import (
	"context"
	"encoding/json"
	"regexp"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/benchcpu"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/tool"
)

// BenchmarkDelegationPolicy runs a whole delegation with and without a
// policy of five rules on the lead: the lead's model calls a FromFactory
// child, whose model calls a plain tool and answers; the lead answers. So
// one delegation is two tool calls, one hand-off, two results and four
// model calls, every one of them checked by each rule (an allow list, a
// deny list, ask-before for a tool never called, a redactor of a value
// never sent, and a path limit for another tool). Events and tracing are
// off, the fake provider loops without recording. The difference in
// allocs/op between the two, over two tool calls, is what the policy
// costs a call.
//
// It reports no time (ns/op is suppressed): the two cases run seconds
// apart, "none" always first, on a machine whose speed drifts, and their
// times disagree by more than the policy costs. It is for allocations and
// for the CPU profile of one case; BenchmarkDelegationPolicyRatio, which
// alternates the two, is the figure of what the policy costs in time.
func BenchmarkDelegationPolicy(b *testing.B) {
	for _, c := range []struct {
		name   string
		policy bool
	}{{"none", false}, {"five rules", true}} {
		b.Run(c.name, func(b *testing.B) {
			run := policyDelegation(b, c.policy)
			b.ReportAllocs()
			for b.Loop() {
				run()
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkDelegationPolicyRatio runs the two cases of
// BenchmarkDelegationPolicy in alternating batches, the order within a
// pair of batches alternating too, and reports a delegation's CPU time
// under the five rules over its CPU time without them as "five/none-cpu"
// (the target is at most 1.15), the same of wall time as "five/none", and
// each case's CPU time, wall time, allocations and bytes per delegation
// ("none-cpu-ns/op", "five-ns/op", "five-allocs/op", ...). CPU time is
// the process's, the garbage collector's included, which on a machine
// shared with other work is what a delegation costs; wall time counts the
// time others held the cores too. The built-in ns/op, of a pair of
// batches, is suppressed; with -benchmem the built-in allocs/op and B/op
// are a pair's too.
//
// A ratio is the median, over windows of eight pairs of batches, of the
// window's time under the rules over its time without them. One pair is
// too short: a collection, a few every eight pairs, lands whole in the
// batch that happens to be running, and the median of pairs, some with a
// collection in the policed batch, some in the other, some in neither,
// moved by 0.3 from one run to the next on a loaded machine (1.05 to
// 1.37); a window holds a share of collections as fair as the whole run,
// and its median still leaves out the windows the machine's other work
// disturbed.
func BenchmarkDelegationPolicyRatio(b *testing.B) {
	none, five := policyDelegation(b, false), policyDelegation(b, true)
	allocsNone, bytesNone := memPerRun(none)
	allocsFive, bytesFive := memPerRun(five)
	const batch, window = 256, 8
	type pair struct{ wallNone, wallFive, cpuNone, cpuFive time.Duration }
	var pairs []pair
	timed := func(f func()) (time.Duration, time.Duration) {
		c0, _ := benchcpu.Now()
		start := time.Now()
		for range batch {
			f()
		}
		d := time.Since(start)
		c1, _ := benchcpu.Now()
		return d, c1 - c0
	}
	for i := 0; b.Loop(); i++ {
		var p pair
		if i%2 == 0 {
			p.wallNone, p.cpuNone = timed(none)
			p.wallFive, p.cpuFive = timed(five)
		} else {
			p.wallFive, p.cpuFive = timed(five)
			p.wallNone, p.cpuNone = timed(none)
		}
		pairs = append(pairs, p)
	}
	var total pair
	var wall, cpu []float64
	for w := range slices.Chunk(pairs, window) {
		if len(w) < window && len(pairs) >= window {
			break // a last window shorter than the others
		}
		var sum pair
		for _, p := range w {
			sum.wallNone, sum.wallFive = sum.wallNone+p.wallNone, sum.wallFive+p.wallFive
			sum.cpuNone, sum.cpuFive = sum.cpuNone+p.cpuNone, sum.cpuFive+p.cpuFive
		}
		wall = append(wall, float64(sum.wallFive)/float64(sum.wallNone))
		if sum.cpuNone > 0 {
			cpu = append(cpu, float64(sum.cpuFive)/float64(sum.cpuNone))
		}
	}
	for _, p := range pairs {
		total.wallNone, total.wallFive = total.wallNone+p.wallNone, total.wallFive+p.wallFive
		total.cpuNone, total.cpuFive = total.cpuNone+p.cpuNone, total.cpuFive+p.cpuFive
	}
	median := func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	perRun := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N*batch) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(wall), "five/none")
	b.ReportMetric(median(cpu), "five/none-cpu")
	b.ReportMetric(perRun(total.cpuNone), "none-cpu-ns/op")
	b.ReportMetric(perRun(total.cpuFive), "five-cpu-ns/op")
	b.ReportMetric(perRun(total.wallNone), "none-ns/op")
	b.ReportMetric(perRun(total.wallFive), "five-ns/op")
	b.ReportMetric(allocsNone, "none-allocs/op")
	b.ReportMetric(allocsFive, "five-allocs/op")
	b.ReportMetric(bytesNone, "none-B/op")
	b.ReportMetric(bytesFive, "five-B/op")
}

// memPerRun returns the allocations and bytes of one call of run, as
// testing counts them for allocs/op and B/op, averaged over a few hundred
// calls after one to warm up.
func memPerRun(run func()) (allocs, bytes float64) {
	const n = 500
	run()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		run()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / n, float64(after.TotalAlloc-before.TotalAlloc) / n
}

// policyDelegation returns one run of BenchmarkDelegationPolicy's
// delegation, under its five rules when policed.
func policyDelegation(b testing.TB, policed bool) func() {
	var lead []agent.Option
	if policed {
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
		lead = append(lead, agent.WithPolicy(five))
	}
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
	l, err := agent.NewReact(p, append([]agent.Option{agent.WithName("lead"), agent.WithTools(sub)}, lead...)...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	in := agent.Input{Text: "How many files?"}
	return func() {
		l.Reset()
		out, err := l.Run(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		if out.ChildUsage.Requests != 2 || out.Messages[2].Content != "3" || len(out.Denials) != 0 {
			b.Fatalf("the delegation did not happen as scripted: %+v", out)
		}
	}
}

// A policy of five rules costs a whole delegation at most four
// allocations per tool call, and a delegation under no policy stays near
// the 40 allocations a whole delegation may make: the policy's checks
// allocate only when a rule acts (it denies, asks or rewrites), and a run
// under no policy makes none of them. (Both cost 39 today; the bound of
// the second leaves room for what a collection's emptied pools cost, as
// AllocsPerRun counts every allocation of the process.)
func TestPolicyAllocationsPerToolCall(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what is allocated")
	}
	none, five := policyDelegation(t, false), policyDelegation(t, true)
	const runs, toolCalls = 200, 2 // the lead's call of the child, the child's lookup
	allocsNone := testing.AllocsPerRun(runs, none)
	allocsFive := testing.AllocsPerRun(runs, five)
	if extra := (allocsFive - allocsNone) / toolCalls; extra > 4 {
		t.Errorf("five rules cost %.1f allocations per tool call (%.0f a delegation against %.0f without a policy); the bound is 4", extra, allocsFive, allocsNone)
	}
	if allocsNone > 44 {
		t.Errorf("a delegation under no policy costs %.0f allocations; the bound is 44", allocsNone)
	}
}
