package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/errcode"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

type seen struct {
	RunID, ParentRunID, Name string
	Depth                    int
}

func identity(ctx context.Context) seen {
	return seen{agent.RunID(ctx), agent.ParentRunID(ctx), agent.Name(ctx), agent.Depth(ctx)}
}

// A parent whose tool runs a child: one provider scripts both, and each
// sees its own run identity in the context.
func TestRunIdentityAndDelegation(t *testing.T) {
	p := fake.NewProvider(
		fake.Call("ask_helper", `{}`).For("lead").WithUsage(u(10, 1)),
		fake.Call("probe", `{}`).For("helper").WithUsage(u(20, 2)),
		fake.Text("helper's answer").For("helper").WithUsage(u(30, 3)),
		fake.Text("lead's answer").For("lead").WithUsage(u(40, 4)),
	)
	var inLead, inHelper seen
	probe := toolFunc("probe", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		inHelper = identity(ctx)
		return tool.Result{Content: "probed"}, nil
	})
	helper := newReact(t, p, agent.WithName("helper"), agent.WithTools(probe))
	var helperOut agent.Output
	ask := toolFunc("ask_helper", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		inLead = identity(ctx)
		out, err := helper.Run(run.WithDepth(ctx, agent.Depth(ctx)+1), agent.Input{Text: "help"})
		helperOut = out
		return tool.Result{Content: out.Answer, Usage: out.TotalUsage()}, err
	})
	lead := newReact(t, p, agent.WithName("lead"), agent.WithTools(ask))
	out, err := lead.Run(t.Context(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Answer != "lead's answer" || helperOut.Answer != "helper's answer" {
		t.Errorf("answers %q, %q", out.Answer, helperOut.Answer)
	}
	if diff := cmp.Diff(seen{RunID: out.RunID, Name: "lead"}, inLead); diff != "" {
		t.Errorf("the lead's tool saw (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(seen{RunID: helperOut.RunID, ParentRunID: out.RunID, Name: "helper", Depth: 1}, inHelper); diff != "" {
		t.Errorf("the helper's tool saw (-want +got):\n%s", diff)
	}
	if out.RunID == helperOut.RunID {
		t.Error("parent and child share a run id")
	}
	if out.Usage != (provider.Usage{InputTokens: 50, OutputTokens: 5, Requests: 2}) || out.ChildUsage != (provider.Usage{InputTokens: 50, OutputTokens: 5, Requests: 2}) {
		t.Errorf("usage %v, child usage %v", out.Usage, out.ChildUsage)
	}
	if len(p.RequestsFor("lead")) != 2 || len(p.RequestsFor("helper")) != 2 || p.Remaining() != 0 {
		t.Errorf("requests: %d by lead, %d by helper, %d replies left", len(p.RequestsFor("lead")), len(p.RequestsFor("helper")), p.Remaining())
	}
	if diff := cmp.Diff(seen{}, identity(t.Context())); diff != "" {
		t.Errorf("outside any run (-want +got):\n%s", diff)
	}
}

func TestFunc(t *testing.T) {
	var a agent.Agent = agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		return agent.Output{Answer: strings.ToUpper(in.Text)}, nil
	})
	out, err := a.Run(t.Context(), agent.Input{Text: "hi"})
	if err != nil || out.Answer != "HI" {
		t.Errorf("Run = %+v, %v", out, err)
	}
}

func TestErrorCode(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{context.Canceled, "cancelled"},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("x: %w", agent.ErrMaxSteps), "max_steps"},
		{agent.ErrToolRetries, "tool_retries"},
		{agent.ErrUsageLimit, "usage_limit"},
		{agent.ErrEmptyReply, "empty_reply"},
		{fmt.Errorf("x: %w", &provider.Error{Kind: provider.KindAuth}), "provider_error"},
		{agent.ErrInvalidOutput, "invalid_output"},
		{fmt.Errorf("resume: %w", tool.ErrUnusedAnswer), "unused_answer"},
		{fmt.Errorf("%w: %w", agent.ErrMaxSteps, context.Canceled), "cancelled"},
		{errors.New("other"), "error"},
	}
	for _, tt := range tests {
		if got := errcode.Of(tt.err); got != tt.want {
			t.Errorf("errcode.Of(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
