package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/policy"
)

// Code that puts a policy's question to a person its own way records the
// question as it puts it, and the answer as it comes: the audit trail
// holds each once. (tool.ApprovePolicy does both.)
func ExampleAnswered() {
	ctx := event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
		var v struct{ Verdict, Rule, Tool, Answer string }
		_ = json.Unmarshal(e.Value, &v)
		fmt.Println(strings.Join(strings.Fields(v.Rule+" "+v.Tool+" "+v.Verdict+" "+v.Answer), " "))
	}))
	pol, err := policy.New(policy.AskBefore("approve-pay", "pay"))
	if err != nil {
		panic(err)
	}
	chk := &policy.Check{Point: policy.BeforeTool, Tool: "pay", CallID: "c1", Arguments: json.RawMessage(`{"amount":40}`)}
	out := pol.Decide(ctx, chk) // an Ask: not recorded yet
	policy.Asking(ctx, chk, out)
	// ... the person approves ...
	policy.Answered(ctx, chk, out, policy.Approved)
	// Output:
	// approve-pay pay ask
	// approve-pay pay allow approved
}
