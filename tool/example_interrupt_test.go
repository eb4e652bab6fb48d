package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/deputy-go/deputy/tool"
)

// A tool that needs a person's approval pauses the call with an
// *tool.Interrupted; the caller answers and calls again under the context
// tool.Resume returns.
func ExampleRequireApproval() {
	wire, _ := tool.New("wire", "Sends money.", func(ctx context.Context, in struct {
		Amount int `json:"amount"`
	}) (string, error) {
		return fmt.Sprintf("sent %d", in.Amount), nil
	})
	guarded := tool.RequireApproval(wire, "moves money", 0)
	call := tool.Call{ID: "call-1", Name: "wire", Arguments: json.RawMessage(`{"amount":40}`)}

	_, err := guarded.Call(context.Background(), call)
	var asked *tool.Interrupted
	if !errors.As(err, &asked) {
		panic(err)
	}
	fmt.Println(asked.Interrupts[0].Reason+":", asked.Interrupts[0].Message)

	ctx, err := tool.Resume(context.Background(), asked, tool.Answer{
		InterruptID: asked.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`),
	})
	if err != nil {
		panic(err)
	}
	res, err := guarded.Call(ctx, call)
	fmt.Println(res.Content, err)
	// Output:
	// tool_approval: moves money: Allow wire with {"amount":40}?
	// sent 40 <nil>
}
