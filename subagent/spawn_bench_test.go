package subagent_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// BenchmarkSpawn measures a whole parent run that spawns one fork which
// answers at once: two parent model calls, the spawn (validation, slot,
// fork built, events off) and the child's run, on the fake provider.
func BenchmarkSpawn(b *testing.B) {
	p := fake.NewProvider(
		spawns(`{"task":"find X","context":"X is a letter"}`).For("lead"),
		fake.Text("done").For("lead"),
		fake.Text("X is 42").For(subagent.DefaultForkName),
	).Loop().DontRecord()
	reg, _ := setup(b, p, false, nil)
	a := lead(b, p, reg)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		a.Reset()
		if _, err := a.Run(ctx, agent.Input{Text: "go"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFanout256 measures a parent turn that spawns 256 forks, 32 at a
// time, each answering after 20ms: the ideal is 8 waves of 20ms. It fails
// when the median fan-out takes more than 1.25 times that (the median, so
// that a hiccup of a shared machine does not fail it; bare timers alone
// take about 165ms here).
func BenchmarkFanout256(b *testing.B) {
	const (
		n       = 256
		slots   = 32
		latency = 20 * time.Millisecond
		ideal   = n / slots * latency
	)
	args := make([]string, n)
	for i := range args {
		args[i] = fmt.Sprintf(`{"task":"t%d"}`, i)
	}
	p := fake.NewProvider(
		spawns(args...).For("lead"),
		fake.Text("done").For("lead"),
		fake.Text("ok").For(subagent.DefaultForkName).After(latency),
	).Loop().DontRecord()
	reg, _ := setup(b, p, false, []subagent.SpawnOption{subagent.WithSpawnConcurrency(slots), subagent.WithMaxSpawns(n)})
	if err := reg.SetParallelism(n); err != nil {
		b.Fatal(err)
	}
	a := lead(b, p, reg)
	ctx := b.Context()
	b.ReportAllocs()
	var walls []time.Duration
	for b.Loop() {
		a.Reset()
		start := time.Now()
		if _, err := a.Run(ctx, agent.Input{Text: "go"}); err != nil {
			b.Fatal(err)
		}
		walls = append(walls, time.Since(start))
	}
	slices.Sort(walls)
	median := walls[len(walls)/2]
	b.ReportMetric(float64(median.Microseconds())/1000, "ms/fanout")
	if limit := ideal * 5 / 4; median > limit {
		b.Errorf("a fan-out took %v (median of %d), more than %v (1.25 × the ideal %v)", median, len(walls), limit, ideal)
	}
}

// BenchmarkSpawn64 measures a parent turn that spawns 64 forks at once,
// each answering at once: the lead's two model calls, 64 spawns and 64
// child runs, on the fake provider (looping, not recording; events off).
// The lead's conversation holds 200 messages before the turn.
//
//   - context: WithContextForks; each fork sends the lead's request (its
//     200 messages shared, not copied) and its task.
//   - fresh: forks with the fork prompt and their task only.
func BenchmarkSpawn64(b *testing.B) {
	const n = 64
	args := make([]string, n)
	for i := range args {
		args[i] = fmt.Sprintf(`{"task":"t%d"}`, i)
	}
	history := make([]provider.Message, 0, 200)
	for i := range 100 {
		history = append(history, provider.UserMessage(fmt.Sprintf("question %d about the survey", i)), provider.AssistantMessage(fmt.Sprintf("answer %d", i)))
	}
	for _, tt := range []struct {
		name string
		opts []subagent.SpawnOption
	}{
		{"context", []subagent.SpawnOption{subagent.WithMaxSpawns(n), subagent.WithContextForks()}},
		{"fresh", []subagent.SpawnOption{subagent.WithMaxSpawns(n)}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			p := fake.NewProvider(
				spawns(args...).For("lead"),
				fake.Text("done").For("lead"),
				fake.Text("ok").For(subagent.DefaultForkName),
			).Loop().DontRecord()
			reg, _ := setup(b, p, false, tt.opts)
			if err := reg.SetParallelism(n); err != nil {
				b.Fatal(err)
			}
			a := lead(b, p, reg)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				a.Reset()
				if _, err := a.Run(ctx, agent.Input{Messages: history, Text: "go"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkContextForkRequest measures a context fork's run of one model
// call over a parent's request of 10 and of 1,000 messages: what grows
// with the parent's conversation is the one copy of its message headers
// when the fork appends its task (about 120 bytes a message, in one
// allocation; the messages' text is shared), never the text itself, and
// the allocations stay as many. The 1,000 messages pass the default
// compaction's bound on messages, which a fork leaves to its parent: it
// sends them as they are, with no summary.
func BenchmarkContextForkRequest(b *testing.B) {
	for _, size := range []int{10, 1_000} {
		b.Run(fmt.Sprint(size, "messages"), func(b *testing.B) {
			msgs := make([]provider.Message, 0, size)
			for i := range size / 2 {
				msgs = append(msgs, provider.UserMessage(fmt.Sprintf("question %d", i)), provider.AssistantMessage(fmt.Sprintf("answer %d", i)))
			}
			msgs = append(msgs[:size-1], provider.UserMessage("the last question"))
			parent := &provider.Request{System: "You lead.", Messages: msgs, CacheKey: "lead"}
			p := fake.NewProvider(fake.Text("ok")).Loop().DontRecord()
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				a, err := agent.NewReact(p, agent.WithName("fork"))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := a.Run(ctx, agent.Input{Text: "your task", Fork: parent}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
