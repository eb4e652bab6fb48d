package agui_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
)

var soakRuns = flag.Int("soak-runs", 2000, "runs of TestServedSoak, in four equal parts")

// writeMeter counts the bytes a backend is asked to write, apart for the
// expert's records and for everything else.
type writeMeter struct {
	store.Backend
	expert, other atomic.Int64
}

func (m *writeMeter) Put(ctx context.Context, writes ...store.Write) error {
	for _, w := range writes {
		if strings.Contains(w.Key, "expert") {
			m.expert.Add(int64(len(w.Value)))
		} else {
			m.other.Add(int64(len(w.Value)))
		}
	}
	return m.Backend.Put(ctx, writes...)
}

// A served lead, with stored threads and one stored expert that every run
// consults, does not slow down as the past grows: what a run writes, of
// the expert and of its thread, is the same in the last quarter of the
// soak as in the first, and the expert keeps answering. Sixteen clients share two
// hundred threads. Throughput and latency are logged per quarter; the
// soak runs longer with -soak-runs.
func TestServedSoak(t *testing.T) {
	runs := *soakRuns
	b, err := sqlite.Open(filepath.Join(t.TempDir(), "soak.db"))
	if err != nil {
		t.Fatal(err)
	}
	m := &writeMeter{Backend: b}
	st := need(store.New(m))(t)
	t.Cleanup(func() { st.Close() })
	answer := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		msg := provider.AssistantMessage("Noted; " + fmt.Sprint(len(req.Messages)) + " messages in view.")
		return provider.Response{Message: msg, Usage: provider.Usage{Requests: 1, InputTokens: int64(len(req.Messages)) * 20, OutputTokens: 8}}, nil
	})
	// A small token bound, so that the soak crosses compactions: the
	// expert summarizes with its own model.
	expertAgent := need(agent.NewReact(answer, agent.WithName("expert"), agent.WithCompaction(agent.Compaction{MaxTokens: 4000})))(t)
	expert := need(subagent.FromAgent("expert", "Keeps the notes of every thread.", expertAgent, subagent.WithStore(st, "expert")))(t)
	h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(consults, agent.WithName("lead"), agent.WithTools(expert))
	}, agui.WithThreads(st)))
	url := serve(t, h).URL

	type quarter struct {
		expert, other int64
		wall          time.Duration
		latencies     []time.Duration
	}
	var quarters [4]quarter
	var next atomic.Int64
	for q := range quarters {
		expertBefore, otherBefore := m.expert.Load(), m.other.Load()
		var mu sync.Mutex
		var wg sync.WaitGroup
		began := time.Now()
		end := int64((q + 1) * runs / 4)
		for range 16 {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= end {
						return
					}
					start := time.Now()
					resp := post(t, url, body(fmt.Sprint("thread-", i%200), fmt.Sprintf("note %d: the hold is dry", i)))
					out := readAll(resp)
					if resp.StatusCode != http.StatusOK || !strings.Contains(out, "told the expert") {
						t.Errorf("run %d: %d %.300s", i, resp.StatusCode, out)
						return
					}
					mu.Lock()
					quarters[q].latencies = append(quarters[q].latencies, time.Since(start))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		quarters[q].wall = time.Since(began)
		quarters[q].expert = m.expert.Load() - expertBefore
		quarters[q].other = m.other.Load() - otherBefore
	}
	per := int64(runs / 4)
	for i, q := range quarters {
		slices.Sort(q.latencies)
		t.Logf("quarter %d: %.0f runs/s, p50 %v, expert wrote %d B/run, threads and the rest %d B/run",
			i+1, float64(per)/q.wall.Seconds(), q.latencies[len(q.latencies)/2].Round(time.Microsecond), q.expert/per, q.other/per)
	}
	first, last := quarters[0].expert, quarters[3].expert
	if last > 2*first {
		t.Errorf("the expert's writes grew from %d B/run in the first quarter to %d in the last", first/per, last/per)
	}
	if first, last := quarters[0].other, quarters[3].other; last > 2*first {
		t.Errorf("the threads' writes grew from %d B/run in the first quarter to %d in the last", first/per, last/per)
	}
	if parts, _, _, err := st.ReadParts(context.Background(), "expert", store.Parts{}); err != nil || len(parts) < 2 {
		t.Errorf("the expert is kept in %d parts (%v), want a whole and what calls added since", len(parts), err)
	}
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// need returns v, or fails t with err.
func need[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
