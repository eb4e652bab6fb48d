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

// stepModel is a lead that calls drive, and a fork that calls step three
// times, then answers with how many messages it took and how many of
// them were different.
type stepModel struct {
	ids   int
	fresh atomic.Int64
}

func (m *stepModel) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	u := provider.Usage{InputTokens: 1, OutputTokens: 1, Requests: 1}
	text := func(s string) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage(s), Usage: u}, nil
	}
	call := func(name string) (provider.Response, error) {
		cs := []provider.ToolCall{{Name: name, Arguments: json.RawMessage(`{}`)}}
		resumetest.NameCalls(m.ids, cs, &m.fresh)
		return provider.Response{Message: provider.AssistantMessage("", cs...), Usage: u}, nil
	}
	if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
		if len(toolResults(req.Messages)) < 3 {
			return call("step")
		}
		var texts []string
		for _, msg := range req.Messages {
			if msg.Role == provider.RoleUser {
				for _, line := range strings.Split(msg.Content, "\n") {
					if strings.HasPrefix(line, "message ") {
						texts = append(texts, line)
					}
				}
			}
		}
		seen := map[string]bool{}
		for _, s := range texts {
			seen[s] = true
		}
		return text(fmt.Sprintf("took %d messages, %d different", len(texts), len(seen)))
	}
	if req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
		return text("done")
	}
	return call("drive")
}

// A job sent more messages than it lists receipts of lists the last
// mailbox.MaxReceipts (64), all of those still waiting among them, and
// says how many it left out; each message reaches it once. A thread's job
// kept in a store ends with a record as bounded. In the three id modes.
func TestJobListsTheLastReceipts(t *testing.T) {
	const batches, batch = 3, 40 // 120 messages, at most 64 waiting at once
	for _, kept := range []bool{false, true} {
		for _, mode := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
			t.Run(fmt.Sprintf("kept=%v/ids=%d", kept, mode), func(t *testing.T) {
				m := &stepModel{ids: mode}
				entered, gate := make(chan struct{}), make(chan struct{})
				step := tool.Func{Def: tool.Definition{Name: "step", Parameters: json.RawMessage(`{"type":"object"}`)},
					Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
						select {
						case entered <- struct{}{}:
						case <-ctx.Done():
							return tool.Result{}, ctx.Err()
						}
						select {
						case <-gate:
							return tool.Result{Content: "stepped"}, nil
						case <-ctx.Done():
							return tool.Result{}, ctx.Err()
						}
					}}
				tools, err := tool.NewRegistry(step)
				if err != nil {
					t.Fatal(err)
				}
				opts := []subagent.SpawnOption{subagent.WithBackground()}
				st := newStore(t)
				if kept {
					opts = []subagent.SpawnOption{subagent.WithJobsAcrossTurns(nil), subagent.WithJobStore(st)}
				}
				s, err := subagent.NewSpawner(m, tools, opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				var status subagent.JobStatus
				var result []subagent.JobResult
				var sendErr error
				drive := tool.Func{Def: tool.Definition{Name: "drive", Parameters: json.RawMessage(`{"type":"object"}`)},
					Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
						jobs := s.Jobs(ctx)
						job, err := jobs.Start(ctx, subagent.Task{Task: "take messages"})
						if err != nil {
							return tool.Result{}, err
						}
						for b := range batches {
							<-entered // the step before took the messages sent so far
							for i := range batch {
								if _, err := jobs.Send(ctx, job.ID, fmt.Sprintf("message %d", b*batch+i+1)); err != nil && sendErr == nil {
									sendErr = err
								}
							}
							gate <- struct{}{}
						}
						if status, err = jobs.Status(job.ID); err != nil {
							return tool.Result{}, err
						}
						if result, err = jobs.Wait(ctx, subagent.WaitFor{IDs: []string{job.ID}, Timeout: time.Minute}); err != nil {
							return tool.Result{}, err
						}
						return tool.Result{Content: "driven"}, nil
					}}
				lead, err := agent.NewReact(m, agent.WithName("lead"), agent.WithTools(s, s.JobsTool(), drive))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := lead.Run(agent.WithThread(t.Context(), "t1"), agent.Input{Text: "go"}); err != nil {
					t.Fatal(err)
				}
				if sendErr != nil {
					t.Fatalf("a send failed: %v", sendErr)
				}
				const all = batches * batch
				if len(result) != 1 || result[0].Result.Content != fmt.Sprintf("took %d messages, %d different", all, all) {
					t.Fatalf("the job answered %+v, want each of the %d messages taken once", result, all)
				}
				for _, st := range []subagent.JobStatus{status, result[0].JobStatus} {
					ms := st.Messages
					if len(ms) != 64 || st.Dropped != all-64 || ms[0].Seq != all-63 || ms[63].Seq != all {
						t.Fatalf("the status lists %d receipts (seq %d to %d) and says %d are left out, want the last 64 and %d", len(ms), ms[0].Seq, ms[len(ms)-1].Seq, st.Dropped, all-64)
					}
				}
				for _, r := range result[0].Messages {
					if r.State != subagent.MessageDelivered {
						t.Fatalf("message %d of the ended job is %s, want delivered", r.Seq, r.State)
					}
				}
				if !kept {
					return
				}
				keys, err := st.Keys(t.Context(), "deputy-jobs/j/", "", 10)
				if err != nil || len(keys) != 1 {
					t.Fatalf("the store keeps the job records %v (%v), want one", keys, err)
				}
				b, _, err := st.Get(t.Context(), keys[0])
				if err != nil {
					t.Fatal(err)
				}
				var rec struct {
					Receipts []subagent.Receipt `json:"receipts"`
					Dropped  int                `json:"receipts_dropped"`
				}
				if err := json.Unmarshal(b, &rec); err != nil {
					t.Fatal(err)
				}
				if len(rec.Receipts) != 64 || rec.Dropped != all-64 {
					t.Errorf("the job's record keeps %d receipts and says %d are left out, want 64 and %d", len(rec.Receipts), rec.Dropped, all-64)
				}
			})
		}
	}
}
