package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// The note of a thread's job that ended between turns is checked by the
// workers' policy as a result (AfterResult) before the next turn's model
// reads it, as in process and as the answer the jobs tool collects is:
// denied, the model reads the denial; redacted, the note as the rule left
// it. (The note went to the model past every rule.)
func TestJobNoteIsCheckedByThePolicyOnTemporal(t *testing.T) {
	const leak = "sk-note-0123456789"
	for _, tc := range []struct {
		name string
		rule policy.Rule
		want string
	}{
		{"denied", denyResult(leak), `rule "no-leaks" denied the result of ` + subagent.JobsToolName},
		{"redacted", policy.Redact("secrets", []string{leak}), "the key is " + policy.Redacted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inEachIDMode(t, func(t *testing.T, c client.Client, id func(n int64, i int) string) {
				jobNoteChecked(t, c, id, tc.rule, tc.want)
			})
		})
	}
}

func jobNoteChecked(t *testing.T, c client.Client, id func(n int64, i int) string, rule policy.Rule, want string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const turn1, turn2, long, leak = "start the search", "what now?", "find the key", "sk-note-0123456789"
	var n atomic.Int64
	var mu sync.Mutex
	var told []string // the notes the second turn's model read
	holding, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		switch task := firstUserOf(req); {
		case task == long && len(rs) == 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
		case task == long:
			return provider.AssistantMessage("the key is " + leak), nil
		case task == turn1 && len(rs) == 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + long + `","background":true}`)}), nil
		case task == turn2:
			mu.Lock()
			for _, msg := range req.Messages {
				if msg.Role == provider.RoleUser && msg.Content != turn1 && msg.Content != turn2 {
					told = append(told, msg.Content)
				}
			}
			mu.Unlock()
			return provider.AssistantMessage("noted"), nil
		}
		return provider.AssistantMessage("started"), nil
	}}
	reg, err := tool.NewRegistry(tool.Must(tool.New("hold", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		once.Do(func() { close(holding) })
		select {
		case <-release:
			return "held", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New(rule)
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-thread-note-policy-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Policy: pol})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	lead := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"hold"}, Spawn: true, Background: true, JobsAcrossTurns: true}}
	tctx := agent.WithOwner(agent.WithThread(ctx, "thread-"+queue), "cy")
	if _, err := lead.Run(tctx, agent.Input{Text: turn1}); err != nil {
		t.Fatal(err)
	}
	<-holding
	close(release) // the turn has ended: the job ends between turns
	for {
		d, err := describe(ctx, c, ThreadWorkflowID("cy", "thread-"+queue)+"/job_1")
		if err == nil && d.WorkflowExecutionInfo.Status == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the job did not end between turns: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := lead.Run(tctx, agent.Input{Text: turn2}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || strings.Contains(told[0], leak) || !strings.Contains(told[0], want) {
		t.Errorf("the second turn's model read the notes %q: want one, holding %q and not the secret", told, want)
	}
}
