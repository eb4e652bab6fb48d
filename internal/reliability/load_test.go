package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/conversation"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestLoadResident sends 10,000 calls from 64 goroutines to one resident
// expert with a bounded history: every call succeeds, the turns never
// interleave, usage adds up exactly, and memory stays flat.
func TestLoadResident(t *testing.T) {
	const calls, workers = 10000, 64
	n := calls
	if testing.Short() {
		n = 1000
	}
	p := fake.NewProvider(fake.Text("noted").WithUsage(provider.Usage{InputTokens: 3, OutputTokens: 2, Requests: 1})).Loop().DontRecord()
	expertAgent, err := agent.NewReact(p, agent.WithName("expert"), agent.WithHistoryLimit(40))
	if err != nil {
		t.Fatal(err)
	}
	expert, err := subagent.FromAgent("expert", "remembers", expertAgent)
	if err != nil {
		t.Fatal(err)
	}
	before := heapInUse()
	var (
		mu    sync.Mutex
		total provider.Usage
		wg    sync.WaitGroup
		next  = make(chan int)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				res, err := expert.Call(context.Background(), tool.Call{ID: fmt.Sprint(i), Name: "expert", Arguments: []byte(`{"task":"q"}`)})
				if err != nil || res.Content != "noted" {
					t.Errorf("call %d: %q, %v", i, res.Content, err)
				}
				mu.Lock()
				total = total.Add(res.Usage)
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	after := heapInUse()
	t.Logf("heap in use: %d KiB before, %d KiB after %d calls", before>>10, after>>10, n)

	if want := (provider.Usage{InputTokens: 3 * int64(n), OutputTokens: 2 * int64(n), Requests: int64(n)}); total != want {
		t.Errorf("usage %v, want %v", total, want)
	}
	hist := expertAgent.History()
	if err := conversation.Check(hist); err != nil {
		t.Errorf("conversation: %v", err)
	}
	for i := 0; i+1 < len(hist); i += 2 {
		if hist[i].Role != provider.RoleUser || hist[i+1].Role != provider.RoleAssistant {
			t.Fatalf("turns interleaved at %d: %s then %s", i, hist[i].Role, hist[i+1].Role)
		}
	}
	if len(hist) > 40 {
		t.Errorf("history of %d messages despite a limit of 40", len(hist))
	}
	if after > before+8<<20 {
		t.Errorf("heap grew from %d KiB to %d KiB", before>>10, after>>10)
	}
}

// TestLoadFactory makes 10,000 factory calls at a concurrency of 256, each
// building, running and closing a ReAct child: usage adds up, every child
// is closed, and memory stays flat.
func TestLoadFactory(t *testing.T) {
	const calls, workers = 10000, 256
	n := calls
	if testing.Short() {
		n = 1000
	}
	p := fake.NewProvider(fake.Text(`{"status":"success","summary":"ok"}`).WithUsage(provider.Usage{InputTokens: 5, OutputTokens: 4, Requests: 1})).Loop().DontRecord()
	var closed sync.WaitGroup
	closed.Add(n)
	worker, err := subagent.FromFactory("worker", "one-shot", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		a, err := agent.NewReact(p, agent.WithName("worker"))
		return closer{a, closed.Done}, err
	}, subagent.WithReport())
	if err != nil {
		t.Fatal(err)
	}
	before := heapInUse()
	var (
		mu    sync.Mutex
		total provider.Usage
		wg    sync.WaitGroup
		next  = make(chan int)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				res, err := worker.Call(context.Background(), tool.Call{ID: fmt.Sprint(i), Name: "worker", Arguments: []byte(`{"task":"t"}`)})
				if err != nil {
					t.Errorf("call %d: %v", i, err)
				}
				if r, ok := res.Value.(subagent.Report); !ok || r.Status != subagent.ReportSuccess {
					t.Errorf("call %d: value %#v", i, res.Value)
				}
				mu.Lock()
				total = total.Add(res.Usage)
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	closed.Wait()
	after := heapInUse()
	t.Logf("heap in use: %d KiB before, %d KiB after %d calls", before>>10, after>>10, n)
	if want := (provider.Usage{InputTokens: 5 * int64(n), OutputTokens: 4 * int64(n), Requests: int64(n)}); total != want {
		t.Errorf("usage %v, want %v", total, want)
	}
	if after > before+8<<20 {
		t.Errorf("heap grew from %d KiB to %d KiB", before>>10, after>>10)
	}
}

// closer is an agent that reports its Close.
type closer struct {
	*agent.React
	done func()
}

func (c closer) Close() error { c.done(); return nil }
