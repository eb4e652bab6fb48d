package subagent

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/benchcpu"
	"github.com/deputy-go/deputy/internal/journal/stored"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/postgres"
	"github.com/deputy-go/deputy/store/postgres/pgtest"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/tool"
)

// BenchmarkJournalRecord measures what the journal adds to one child on
// the embedded store, with its default settings (WAL, synchronous=NORMAL)
// and with every commit flushed to disk (FULL), and on PostgreSQL when
// DEPUTY_TEST_POSTGRES names a server: the key's hash, the lookup, and the
// recorded entry (about 100 bytes) in its own transaction, one child at a
// time, the worst case, since concurrent children share a commit. The
// target is in cpu-ns/op: at most 1.3 times the bare insert's.
func BenchmarkJournalRecord(b *testing.B) {
	backends := []struct {
		name string
		open func(b *testing.B) store.Backend
	}{
		{"sqlite-NORMAL", func(b *testing.B) store.Backend {
			be, err := sqlite.Open(filepath.Join(b.TempDir(), "deputy.db"))
			if err != nil {
				b.Fatal(err)
			}
			return be
		}},
		{"sqlite-FULL", func(b *testing.B) store.Backend {
			be, err := sqlite.Open(filepath.Join(b.TempDir(), "deputy.db"), sqlite.WithSynchronousFull())
			if err != nil {
				b.Fatal(err)
			}
			return be
		}},
		{"postgres", func(b *testing.B) store.Backend {
			be, err := postgres.Open(context.Background(), pgtest.DSN(b, "deputy_bench_subagent"))
			if err != nil {
				b.Fatal(err)
			}
			return be
		}},
	}
	for _, bk := range backends {
		b.Run(bk.name, func(b *testing.B) {
			st, _ := store.New(bk.open(b))
			defer st.Close()
			ctx := context.Background()
			j, err := st.Journal(ctx, "turn")
			if err != nil {
				b.Fatal(err)
			}
			js := stored.New(j)
			args := json.RawMessage(`{"task":"summarize the third chapter of the report"}`)
			e := store.Entry{Content: "The third chapter says revenue grew by 4% in the quarter.", Usage: provider.Usage{InputTokens: 900, OutputTokens: 40, Requests: 1}}
			b.ReportAllocs()
			defer benchcpu.Report(b)()
			for b.Loop() {
				key := js.Key("worker", args)
				if _, ok := j.Lookup(key); ok {
					b.Fatal("replayed")
				}
				if err := j.Record(ctx, key, e); err != nil {
					b.Fatal(err)
				}
			}
		})
		// The floor: the same bytes inserted with the same driver, each in
		// a transaction of its own, with nothing of the journal around it.
		b.Run(bk.name+"-bare", func(b *testing.B) {
			be := bk.open(b)
			defer be.Close()
			ctx := context.Background()
			// The bytes the journal writes: its entry, behind the record's
			// five-byte header, under a key of the same length and order.
			entry, _ := json.Marshal(store.Entry{Content: "The third chapter says revenue grew by 4% in the quarter.", Usage: provider.Usage{InputTokens: 900, OutputTokens: 40, Requests: 1}})
			value := append(make([]byte, 5), entry...)
			b.ReportAllocs()
			defer benchcpu.Report(b)()
			i := 0
			for b.Loop() {
				i++
				if err := be.Put(ctx, store.Write{Key: "j/turn\x1fworker.6f1ed002ab5595859014ebf0." + strconv.Itoa(i), Value: value, Version: store.AnyVersion}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFanOutJournal measures one lead turn that asks for 64 one-shot
// children at once, each a ReAct child whose model takes 20 ms, run as
// the registry runs them (tool.DefaultParallelism at a time), with and
// without a journal on the embedded store (each iteration a new turn, so
// every child runs and is recorded). The ratio of the two is the journal's
// cost on a realistic fan-out.
func BenchmarkFanOutJournal(b *testing.B) {
	child := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		time.Sleep(20 * time.Millisecond)
		return provider.Response{Message: provider.AssistantMessage("done"), Usage: provider.Usage{InputTokens: 20, OutputTokens: 2, Requests: 1}}, nil
	})
	worker, err := FromFactory("worker", "Does one task.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(child, agent.WithName("worker"))
	}, WithInputFromArgs(argsTask))
	if err != nil {
		b.Fatal(err)
	}
	calls := make([]provider.ToolCall, 64)
	for i := range calls {
		calls[i] = provider.ToolCall{ID: "call_" + strconv.Itoa(i), Name: "worker", Arguments: []byte(fmt.Sprintf(`{"task":"task %d"}`, i))}
	}
	for _, journal := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[journal], func(b *testing.B) {
			be, err := sqlite.Open(filepath.Join(b.TempDir(), "deputy.db"))
			if err != nil {
				b.Fatal(err)
			}
			st, _ := store.New(be)
			defer st.Close()
			ctx := context.Background()
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				lead, err := agent.NewReact(fake.NewProvider(fake.Calls(calls...), fake.Text("all done")).DontRecord(), agent.WithName("lead"), agent.WithTools(worker))
				if err != nil {
					b.Fatal(err)
				}
				rctx := ctx
				if journal {
					n++
					j, err := st.Journal(ctx, "turn-"+strconv.Itoa(n))
					if err != nil {
						b.Fatal(err)
					}
					rctx = agent.WithJournal(ctx, j)
				}
				if _, err := lead.Run(rctx, agent.Input{Text: "go"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkResidentStored measures one call of a resident expert whose
// conversation is kept in memory, and of the same expert kept on the
// embedded store (the lease taken and released, the conversation read,
// snapshotted and written back in a versioned write). The model answers at
// once; the conversation is capped at about 2,000 messages
// (WithHistoryLimit) and compacted by the default policy at 1,000, so
// that the amount stored stays within the same bounds however long the
// benchmark runs.
func BenchmarkResidentStored(b *testing.B) {
	for _, stored := range []bool{false, true} {
		b.Run(map[bool]string{false: "memory", true: "sqlite"}[stored], func(b *testing.B) {
			p := fake.NewProvider(fake.Text("The answer is 42, as computed from the ledger.")).Loop().DontRecord()
			r, err := agent.NewReact(p, agent.WithName("expert"), agent.WithHistoryLimit(2000))
			if err != nil {
				b.Fatal(err)
			}
			var opts []Option
			if stored {
				be, err := sqlite.Open(filepath.Join(b.TempDir(), "deputy.db"))
				if err != nil {
					b.Fatal(err)
				}
				st, _ := store.New(be)
				defer st.Close()
				opts = append(opts, WithStore(st, "expert"))
			}
			ex, err := FromAgent("expert", "Knows the ledger.", r, opts...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			call := tool.Call{ID: "c", Name: "expert", Arguments: json.RawMessage(`{"task":"what is the total?"}`)}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ex.Call(ctx, call); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStoredConsultation measures one call of a resident expert kept
// on the embedded store whose conversation already holds depth calls (two
// messages each, never compacted), on a model that answers at once: the
// lease, the head read, the run, and the write of what the call added.
// written-B/op is what the call wrote to the store, which must not grow
// with the conversation (it includes, amortized, the occasional whole
// rewrite).
func BenchmarkStoredConsultation(b *testing.B) {
	for _, depth := range []int{1, 100, 1_000, 10_000} {
		b.Run("depth="+strconv.Itoa(depth), func(b *testing.B) {
			st, m := meteredStore(b)
			p := fake.NewProvider(fake.Text("The answer is 42, as computed from the ledger.")).Loop().DontRecord()
			r, err := agent.NewReact(p, agent.WithName("expert"), agent.WithoutCompaction())
			if err != nil {
				b.Fatal(err)
			}
			for i := range depth {
				if _, err := r.Run(context.Background(), agent.Input{Text: "Question " + strconv.Itoa(i) + ": what is the total?"}); err != nil {
					b.Fatal(err)
				}
			}
			ex, err := FromAgent("expert", "Knows the ledger.", r, WithStore(st, "expert"))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			call := tool.Call{ID: "c", Name: "expert", Arguments: json.RawMessage(`{"task":"what is the total?"}`)}
			if _, err := ex.Call(ctx, call); err != nil { // stores the conversation whole, once
				b.Fatal(err)
			}
			before, _ := m.counts()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ex.Call(ctx, call); err != nil {
					b.Fatal(err)
				}
			}
			after, _ := m.counts()
			b.ReportMetric(float64(after-before)/float64(b.N), "written-B/op")
		})
	}
}
