package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.temporal.io/sdk/client"

	"github.com/deputy-go/deputy/internal/ledger"
	drun "github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/internal/usage"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// residentTask is what a model hands a resident through ResidentTool.
type residentTask struct {
	Task string `json:"task" jsonschema:"required,description=The question or task for the expert"`
}

// ResidentTool returns a tool by which an agent in process consults the
// resident expert of workflow workflowID (a ResidentWorkflow) on Temporal:
// each call is an AskUpdate that names the calling agent's path in its
// tree, so the workers' policy checks the hand-off as that agent's and the
// resident's run as its sub-agent's, as FromAgent's resident is checked in
// process. What the resident's turn spent counts in the calling run's
// usage and cost (per provider and model, at the workers' prices), under
// its limits. Under a journal (agent.WithJournal) a call is asked once per
// turn: a resumed turn reads the answer it got, counted as spent by an
// earlier run of the turn, and does not ask again. A call the resident
// fails (a denied hand-off, a conversation that would grow too large)
// comes back to the model as an error result.
func ResidentTool(c client.Client, workflowID, name, description string) (tool.Tool, error) {
	if c == nil || workflowID == "" {
		return nil, errors.New("temporal: ResidentTool needs a client and the resident's workflow ID (the ID its ResidentWorkflow was started with)")
	}
	return tool.New(name, description, func(ctx context.Context, in residentTask) (tool.Result, error) {
		caller := drun.Path(ctx)
		asked := false
		raw, err := tool.Once(ctx, "temporal.resident", func(ctx context.Context) (json.RawMessage, error) {
			asked = true
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: workflowID, UpdateName: AskUpdate,
				Args: []any{in.Task, caller}, WaitForStage: client.WorkflowUpdateStageCompleted})
			if err != nil {
				return nil, err
			}
			var out RunOutput
			if err := h.Get(ctx, &out); err != nil {
				return nil, err
			}
			out.Messages = nil // the resident keeps its conversation; the answer is what the caller needs
			return json.Marshal(out)
		})
		if err != nil {
			if ctx.Err() != nil {
				return tool.Result{}, ctx.Err()
			}
			return tool.Result{Content: fmt.Sprintf("resident %s: %v", name, err), IsError: true, Err: err}, nil
		}
		var out RunOutput
		if err := json.Unmarshal(raw, &out); err != nil {
			return tool.Result{}, fmt.Errorf("temporal: resident %s: a journaled answer is damaged: %w", name, err)
		}
		var counted provider.Usage
		var dollars float64
		for _, m := range out.Models {
			ledger.Charge(ctx, m, "", true, !asked)
			counted, dollars = counted.Add(m.Usage), dollars+m.Cost
		}
		if rest, cost := usage.Less(out.TotalUsage(), counted), out.Cost-dollars; !rest.IsZero() || cost > 0 {
			// What no model accounts for (a factory's agent, a judge).
			ledger.Charge(ctx, provider.ModelUsage{Provider: "temporal", Model: name, Usage: rest, Cost: max(cost, 0)}, "", true, !asked)
		}
		return tool.Result{Content: out.Answer, Usage: out.TotalUsage()}, nil
	})
}
