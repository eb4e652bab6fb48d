package agui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/postgres"
	"github.com/deputy-go/deputy/store/postgres/pgtest"
	"github.com/deputy-go/deputy/subagent"
)

// BenchmarkServedRun is one AG-UI request served whole (decode, run,
// every event encoded and written to a recorder): a lead on a scripted
// model that consults an expert once and answers. "shared" is today's
// default, a FromAgent expert and no authorization; "authorized" adds
// WithAuthorize; "scoped" makes the expert FromScoped(PerThread), on
// threads of 64 users; "authorized+scoped" both.
func BenchmarkServedRun(b *testing.B) {
	answer := agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		return agent.Output{Answer: "42"}, nil
	})
	lead := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("the expert says " + last.Content)}, nil
		}
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "expert", Arguments: json.RawMessage(`{"task":"what is it?"}`)})}, nil
	})
	authorize := func(r *http.Request, _ string) (string, error) {
		u, _ := r.Context().Value(userKey{}).(string)
		return u, nil
	}
	for _, bc := range []struct {
		name         string
		auth, scoped bool
	}{{"shared", false, false}, {"authorized", true, false}, {"scoped", false, true}, {"authorized+scoped", true, true}} {
		b.Run(bc.name, func(b *testing.B) {
			var expert *subagent.SubAgentTool
			var err error
			if bc.scoped {
				expert, err = subagent.FromScoped("expert", "Knows.", subagent.PerThread, func(string) (agent.Agent, error) { return answer, nil })
			} else {
				expert, err = subagent.FromAgent("expert", "Knows.", answer)
			}
			if err != nil {
				b.Fatal(err)
			}
			opts := []agui.Option{}
			if bc.auth {
				opts = append(opts, agui.WithAuthorize(authorize))
			}
			h := must(b)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
				return agent.NewReact(lead, agent.WithName("lead"), agent.WithTools(expert))
			}, opts...))
			bodies := make([]string, 64)
			for i := range bodies {
				bodies[i] = body(fmt.Sprint("thread-", i), "hello")
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(bodies[i%64]))
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, fmt.Sprint("u", i%64)))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "the expert says 42") {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// BenchmarkListThreads walks all 10,000 threads of one owner, a page at
// a time, among the threads of 9 other owners, on each backend.
func BenchmarkListThreads(b *testing.B) {
	const threads = 10000
	backends := map[string]func(b *testing.B) *store.Store{
		"sqlite": func(b *testing.B) *store.Store {
			return sqliteStore(b, filepath.Join(b.TempDir(), "s.db"))
		},
		"postgres": func(b *testing.B) *store.Store {
			pb, err := postgres.Open(context.Background(), pgtest.DSN(b, "deputy_bench_agui_list"))
			if err != nil {
				b.Fatal(err)
			}
			st, err := store.New(pb)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			return st
		},
	}
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			st := backends[name](b)
			ctx := context.Background()
			msgs := []provider.Message{provider.UserMessage(strings.Repeat("a long question ", 64)), provider.AssistantMessage(strings.Repeat("a long answer ", 256))}
			for o := range 10 {
				n := 100
				if o == 3 {
					n = threads
				}
				for i := range n {
					if err := st.SaveConversation(ctx, agui.ThreadKey(fmt.Sprint("owner-", o), fmt.Sprintf("thread-%05d", i)), msgs, 0); err != nil {
						b.Fatal(err)
					}
				}
			}
			h := must(b)(agui.NewPerRequest(func(context.Context, *agui.RunInput) (agent.Agent, error) { return nil, nil }, agui.WithThreads(st)))
			for _, page := range []int{100, store.MaxPage} {
				b.Run(fmt.Sprint("page=", page), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						seen, after := 0, ""
						for {
							p, err := h.ListThreads(ctx, "owner-3", after, page)
							if err != nil {
								b.Fatal(err)
							}
							seen += len(p.Threads)
							if p.Next == "" {
								break
							}
							after = p.Next
						}
						if seen != threads {
							b.Fatalf("listed %d threads, want %d", seen, threads)
						}
					}
				})
			}
		})
	}
}
