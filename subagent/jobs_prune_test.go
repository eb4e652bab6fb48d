package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// quickModel is a lead that calls drive, then answers, and a fork that
// answers at once.
type quickModel struct {
	ids   int
	fresh atomic.Int64
}

func (m *quickModel) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	u := provider.Usage{InputTokens: 1, OutputTokens: 1, Requests: 1}
	if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) || req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
		return provider.Response{Message: provider.AssistantMessage("done"), Usage: u}, nil
	}
	cs := []provider.ToolCall{{Name: "drive", Arguments: json.RawMessage(`{}`)}}
	resumetest.NameCalls(m.ids, cs, &m.fresh)
	return provider.Response{Message: provider.AssistantMessage("", cs...), Usage: u}, nil
}

// A thread whose jobs' note is "" (the jobs are left to a wait) keeps at
// most 64 jobs that ended all the same: past them, the turn that ends
// collects the oldest and forgets them. Their usage counts once, in its
// ChildUsage, as that of the jobs it keeps, which it counts as they spend:
// the wait that collects those later owes nothing more. In the three id
// modes.
func TestThreadWithBlankNoteKeepsJobsBounded(t *testing.T) {
	const started = 70
	for _, mode := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", mode), func(t *testing.T) {
			m := &quickModel{ids: mode}
			tools, err := tool.NewRegistry()
			if err != nil {
				t.Fatal(err)
			}
			s, err := subagent.NewSpawner(m, tools, subagent.WithMaxSpawns(started), subagent.WithJobsAcrossTurns(func(subagent.JobResult) string { return "" }))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			drive := tool.Func{Def: tool.Definition{Name: "drive", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
					jobs := s.Jobs(ctx)
					for range started {
						job, err := jobs.Start(ctx, subagent.Task{Task: "answer"})
						if err != nil {
							return tool.Result{}, err
						}
						for st := job; st.State == subagent.JobRunning; time.Sleep(100 * time.Microsecond) {
							if st, err = jobs.Status(job.ID); err != nil {
								return tool.Result{}, err
							}
						}
					}
					return tool.Result{Content: "driven"}, nil
				}}
			lead, err := agent.NewReact(m, agent.WithName("lead"), agent.WithTools(s, s.JobsTool(), drive))
			if err != nil {
				t.Fatal(err)
			}
			ctx := agent.WithThread(t.Context(), "t1")
			out, err := lead.Run(ctx, agent.Input{Text: "go"})
			if err != nil {
				t.Fatal(err)
			}
			jobs := s.Jobs(ctx).List()
			if len(jobs) != 64 {
				t.Fatalf("the thread keeps %d jobs after its turn, want 64 (the drive: %q)", len(jobs), toolResults(out.Messages))
			}
			if n := int64(started); out.ChildUsage != (provider.Usage{InputTokens: n, OutputTokens: n, Requests: n}) {
				t.Errorf("the turn's ChildUsage is %+v, want that of the %d jobs it ran, %d requests of a token each way", out.ChildUsage, n, n)
			}
			// A wait collects each job kept.
			got, err := s.Jobs(ctx).Wait(ctx, subagent.WaitFor{Timeout: time.Minute})
			if err != nil || len(got) != 64 {
				t.Fatalf("a wait collects %d jobs (%v), want 64", len(got), err)
			}
			for _, r := range got {
				if !r.Result.Usage.IsZero() {
					t.Errorf("the wait collects job %s with %+v, which the turn counted", r.ID, r.Result.Usage)
				}
			}
		})
	}
}
