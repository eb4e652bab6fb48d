package devui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
)

// A re-run's lead shows what the re-run's model calls billed, its own and
// its sub-agents', not "0 in, 0 out": its RUN_FINISHED carries the usage
// the viewer draws on the lead's node, as a run's does — whatever ids the
// model gives its calls.
func TestRerunReportsWhatItSpent(t *testing.T) {
	for _, ids := range []string{"fresh", "none", "restart"} {
		t.Run(ids, func(t *testing.T) {
			st, err := store.New(memory.New())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			var billedIn, billedOut, helped, n atomic.Int64
			bill := func(in, out int64) provider.Usage {
				billedIn.Add(in)
				billedOut.Add(out)
				return provider.Usage{InputTokens: in, OutputTokens: out, Requests: 1}
			}
			lead := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				u := bill(100, 10)
				if req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
					return provider.Response{Message: provider.AssistantMessage("final"), Usage: u, Model: "lead-m"}, nil
				}
				id := func(i int) string {
					switch ids {
					case "fresh":
						return fmt.Sprintf("call_%d", n.Add(1))
					case "restart":
						return fmt.Sprintf("call_%d", i)
					}
					return ""
				}
				return provider.Response{Message: provider.AssistantMessage("",
					provider.ToolCall{ID: id(0), Name: "helper", Arguments: json.RawMessage(`{"task":"one"}`)},
					provider.ToolCall{ID: id(1), Name: "helper", Arguments: json.RawMessage(`{"task":"two"}`)}), Usage: u, Model: "lead-m"}, nil
			})
			helperModel := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				helped.Add(1)
				return provider.Response{Message: provider.AssistantMessage("did it"), Usage: bill(40, 4), Model: "helper-m"}, nil
			})
			build := func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
				helper, err := subagent.FromFactory("helper", "Helps.", func(context.Context, json.RawMessage) (agent.Agent, error) {
					return agent.NewReact(helperModel, agent.WithName("helper"))
				})
				if err != nil {
					return nil, err
				}
				return agent.NewReact(lead, agent.WithName("lead"), agent.WithTools(helper))
			}
			srv := rerunViewer(t, st, build)
			status, first := post(t, srv.URL+"/run", runBody)
			if status != http.StatusOK {
				t.Fatalf("the run: %d", status)
			}
			var call string
			for _, e := range first {
				var ev struct{ Type, ToolCallID, SubagentRunID string }
				if json.Unmarshal(e, &ev) == nil && ev.Type == "TOOL_CALL_START" && ev.SubagentRunID == "" && call == "" {
					call = ev.ToolCallID
				}
			}
			// The lead's usage, as the viewer reads it from RUN_FINISHED.
			leadFigures := func(events []json.RawMessage) (in, out int64) {
				for _, e := range events {
					var ev struct {
						Type  string
						Usage []struct{ InputTokens, OutputTokens int64 }
					}
					if json.Unmarshal(e, &ev) == nil && ev.Type == "RUN_FINISHED" {
						for _, u := range ev.Usage {
							in, out = in+u.InputTokens, out+u.OutputTokens
						}
					}
				}
				return in, out
			}
			for _, body := range []string{
				// The lead's answer to the first call edited: the lead's one step.
				`{"threadId":"t1","runId":"r2","toolCallId":"` + call + `","answer":"did it by hand"}`,
				// The first call's task edited: the helper again, then the lead.
				`{"threadId":"t1","runId":"r3","toolCallId":"` + call + `","task":"three"}`,
			} {
				in0, out0, helped0 := billedIn.Load(), billedOut.Load(), helped.Load()
				status, events := post(t, srv.URL+"/rerun", body)
				if status != http.StatusOK {
					t.Fatalf("re-run %s: %d", body, status)
				}
				in, out := leadFigures(events)
				wantIn, wantOut := billedIn.Load()-in0, billedOut.Load()-out0
				if wantIn == 0 || in != wantIn || out != wantOut {
					t.Errorf("re-run %s: the lead shows %d in, %d out; its models billed %d in, %d out (the helper ran %d times)",
						body, in, out, wantIn, wantOut, helped.Load()-helped0)
				}
			}
		})
	}
}
