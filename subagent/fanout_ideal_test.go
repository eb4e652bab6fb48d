package subagent

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
)

// slowStartRounds is how many round trips the calls of a fan-out of n
// need under an Admission's defaults, when the provider never pushes back:
// the first round admits provider.DefaultInitialInFlight calls, and each
// call that succeeds raises the bound by one, so every round admits twice
// as many as the one before. It is the least r with
// DefaultInitialInFlight·(2^r − 1) ≥ n.
func slowStartRounds(n int) int {
	r, admitted, round := 0, 0, provider.DefaultInitialInFlight
	for admitted < n {
		admitted += round
		round *= 2
		r++
	}
	return r
}

// virtualFanout runs, in a synctest bubble (so on virtual time, whatever
// the machine's load), one lead turn that calls a FromFactory child n
// times in the default configuration (no agent.WithParallelism), every
// model call, the lead's two and each child's one, taking latency. With
// admitted, every call goes through one provider.Admission with its
// defaults, the one openai.New and anthropic.New make. It returns the
// turn's virtual wall time and its ideal:
//
//   - without admission, 3·latency: the lead's call, one wave of n
//     children all at once, the lead's wrap-up call;
//   - with admission, (2 + slowStartRounds(n))·latency: the lead's two
//     calls and as many waves of children as the Admission's bound on
//     calls in flight allows at best (16, 32, 64, … at once), so 9·latency
//     for 1,024 children.
//
// CPU takes no virtual time, so what the ratio measures is whether any
// call waits for something other than the model calls before it that it
// must wait for: a spawn serialized behind another's model call, a child
// queued behind a later one, a wave started late.
func virtualFanout(t *testing.T, n int, latency time.Duration, admitted bool) (wall, ideal time.Duration) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		calls := make([]provider.ToolCall, n)
		for i := range calls {
			calls[i] = provider.ToolCall{Name: "child", Arguments: json.RawMessage(fmt.Sprintf(`{"task":"part %d"}`, i))}
		}
		var p provider.Provider = fake.NewProvider(
			fake.Calls(calls...).After(latency).For("lead"),
			fake.Text("All parts done.").After(latency).For("lead"),
			fake.Text("done").After(latency).For("child"),
		).Loop().DontRecord()
		ideal = 3 * latency
		if admitted {
			adm, err := provider.NewAdmission()
			if err != nil {
				t.Fatal(err)
			}
			p = provider.Admit(p, adm)
			ideal = time.Duration(2+slowStartRounds(n)) * latency
		}
		sub, err := FromFactory("child", "Does one part.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, agent.WithName("child"))
		})
		if err != nil {
			t.Fatal(err)
		}
		lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(sub))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		out, err := lead.Run(t.Context(), agent.Input{Text: "Do all parts."})
		wall = time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if out.ChildUsage.Requests != int64(n) || out.Usage.Requests != 2 {
			t.Fatalf("%d child requests and %d of the lead, want %d and 2", out.ChildUsage.Requests, out.Usage.Requests, n)
		}
	})
	return wall, ideal
}

// TestFanoutDefaultIdeal holds the fan-out of the default configuration
// to at most 1.3 times its ideal (see virtualFanout for what the ideal is),
// on virtual time, so the figure is the same on an idle machine and a
// loaded one: 1,024 children on a bare provider, and on one under the
// Admission a real provider makes by default. BenchmarkFanoutDefault
// measures the same turn on the wall clock, with the CPU it takes.
func TestFanoutDefaultIdeal(t *testing.T) {
	const latency = 200 * time.Millisecond
	for _, c := range []struct {
		name     string
		n        int
		admitted bool
	}{
		{"bare/1024", 1024, false},
		{"admitted/16", 16, true},
		{"admitted/1024", 1024, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			wall, ideal := virtualFanout(t, c.n, latency, c.admitted)
			ratio := float64(wall) / float64(ideal)
			t.Logf("%d children: %v of virtual time, ideal %v: %.3f× ideal, %.2f× the unbounded ideal (%v)", c.n, wall, ideal, ratio, float64(wall)/float64(3*latency), 3*latency)
			if ratio > 1.3 {
				t.Errorf("%d children took %v of virtual time, %.2f× the ideal %v (at most 1.3×)", c.n, wall, ratio, ideal)
			}
			// The ideal is a floor: a turn that beats it has calls that
			// took no latency, or an ideal that is not one, and the bound
			// above holds nothing.
			if wall < ideal {
				t.Errorf("%d children took %v of virtual time, less than the ideal %v: the ideal is not a floor", c.n, wall, ideal)
			}
		})
	}
}
