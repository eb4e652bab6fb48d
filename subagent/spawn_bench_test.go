package subagent_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
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
