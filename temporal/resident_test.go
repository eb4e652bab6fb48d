package temporal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
)

// echo answers each question with the number of user messages it has seen,
// so the answer shows whether the conversation was carried along.
func echo() *script {
	return &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		q := lastUser(req)
		if q == "fail" {
			return provider.Message{}, &provider.Error{Kind: provider.KindBadRequest, Message: "no"}
		}
		users := 0
		for _, m := range req.Messages {
			if m.Role == provider.RoleUser {
				users++
			}
		}
		return provider.AssistantMessage(fmt.Sprintf("%s #%d", q, users)), nil
	}}
}

func ask(env *testsuite.TestWorkflowEnvironment, at time.Duration, id, task string, got map[string]string) {
	askCounting(env, at, id, task, got, nil)
}

// askCounting asks as ask does, and keeps each answered call's usage in
// usage when it is not nil.
func askCounting(env *testsuite.TestWorkflowEnvironment, at time.Duration, id, task string, got map[string]string, usage map[string]provider.Usage) {
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(AskUpdate, id, &testsuite.TestUpdateCallback{
			OnReject: func(err error) { got[id] = "rejected: " + err.Error() },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				if err != nil {
					got[id] = "error: " + err.Error()
					return
				}
				got[id] = v.(RunOutput).Answer
				if usage != nil {
					usage[id] = v.(RunOutput).Usage
				}
			},
		}, task)
	}, at)
}

func TestResidentKeepsConversationAndClosesOnSignal(t *testing.T) {
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": echo()}})
	got := map[string]string{}
	ask(env, time.Second, "1", "a", got)
	ask(env, time.Second, "2", "b", got) // same instant: runs after "1"
	ask(env, 2*time.Second, "3", "fail", got)
	ask(env, 3*time.Second, "4", "", got)
	ask(env, 4*time.Second, "5", "c", got)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(CloseSignal, nil) }, 5*time.Second)
	env.ExecuteWorkflow(ResidentWorkflowName, ResidentInput{Spec: Spec{Provider: "m", MaxAttempts: 1}})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"1": "a #1", "2": "b #2", "5": "c #3"}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("ask %s: %q, want %q", id, got[id], w)
		}
	}
	if !strings.HasPrefix(got["3"], "error:") || !strings.HasPrefix(got["4"], "rejected: empty task") {
		t.Errorf("failed ask %q, empty ask %q", got["3"], got["4"])
	}
	var conv []provider.Message
	if err := env.GetWorkflowResult(&conv); err != nil {
		t.Fatal(err)
	}
	if len(conv) != 6 {
		t.Fatalf("conversation has %d messages, want 6 (the failed call leaves none): %+v", len(conv), conv)
	}
}

func TestResidentContinuesAsNewWithItsConversation(t *testing.T) {
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": echo()}})
	got := map[string]string{}
	for i := range 6 {
		ask(env, time.Duration(i+1)*time.Second, fmt.Sprint(i), fmt.Sprint("q", i), got)
	}
	// The in-memory suite does not count events; the history "grows" past
	// the limit after the third answer.
	env.RegisterDelayedCallback(func() { env.SetCurrentHistoryLength(31) }, 3500*time.Millisecond)
	prior := []provider.Message{provider.UserMessage("earlier"), provider.AssistantMessage("yes")}
	env.ExecuteWorkflow(ResidentWorkflowName, ResidentInput{Spec: Spec{Provider: "m"}, Messages: prior, Turn: 1, MaxHistoryEvents: 30})
	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("error %v, want continue-as-new", err)
	}
	var next ResidentInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	answered := 0
	for i := range 6 {
		if a := got[fmt.Sprint(i)]; a == fmt.Sprintf("q%d #%d", i, i+2) {
			answered++
		} else if a != "" {
			t.Errorf("ask %d: %q", i, a)
		}
	}
	if answered != 3 {
		t.Fatalf("%d asks answered before continue-as-new, want 3", answered)
	}
	if next.Turn != 1+answered || len(next.Messages) != 2+2*answered || next.Messages[0].Content != "earlier" {
		t.Fatalf("carried turn %d and %d messages after %d answers", next.Turn, len(next.Messages), answered)
	}
	if next.MaxHistoryEvents != 30 || next.Spec.Provider != "m" {
		t.Fatalf("carried input %+v", next)
	}
}

// A resident compacts its conversation as a React does: past the bound,
// its older turns become a summary a model activity writes, so the
// conversation it keeps (and would carry over a continue-as-new) stays
// bounded and the model still sees what was folded; a summary that fails
// fails that call alone, with the conversation as it was, and the summary's
// cost counts in the call's usage.
func TestResidentCompactsItsConversation(t *testing.T) {
	var summaries atomic.Int64
	var failSummary atomic.Bool
	model := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		if req.System == agent.DefaultSummaryPrompt {
			summaries.Add(1)
			if failSummary.Swap(false) {
				return provider.Message{}, &provider.Error{Kind: provider.KindBadRequest, Message: "summary refused"}
			}
			return provider.AssistantMessage(fmt.Sprintf("folded %d questions", strings.Count(req.Messages[0].Content, "User: "))), nil
		}
		summary := ""
		if strings.HasPrefix(req.Messages[0].Content, "[Summary") {
			summary = " after a summary"
		}
		return provider.AssistantMessage(lastUser(req) + summary), nil
	}}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": model}})
	got := map[string]string{}
	usage := map[string]provider.Usage{}
	for i := range 12 {
		id := fmt.Sprint(i)
		at := time.Duration(i+1) * time.Second
		if i == 8 {
			env.RegisterDelayedCallback(func() { failSummary.Store(true) }, at-time.Millisecond)
		}
		askCounting(env, at, id, "q"+id, got, usage)
	}
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(CloseSignal, nil) }, 13*time.Second)
	env.ExecuteWorkflow(ResidentWorkflowName, ResidentInput{Spec: Spec{Provider: "m", MaxAttempts: 1},
		Compaction: Compaction{MaxMessages: 6, KeepTurns: 1}})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got["8"], "compacting its conversation") || !strings.Contains(got["8"], "summary refused") {
		t.Errorf("the call whose summary failed: %q, want the compaction's error", got["8"])
	}
	for _, id := range []string{"4", "9", "11"} {
		if got[id] != "q"+id+" after a summary" {
			t.Errorf("ask %s: %q, want an answer given after a summary", id, got[id])
		}
	}
	var conv []provider.Message
	if err := env.GetWorkflowResult(&conv); err != nil {
		t.Fatal(err)
	}
	if len(conv) > 6+2 || !strings.HasPrefix(conv[0].Content, "[Summary") || conv[len(conv)-2].Content != "q11" {
		t.Fatalf("kept %d messages: %v", len(conv), conv)
	}
	if n := summaries.Load(); n < 3 {
		t.Errorf("%d summaries over 12 calls with a bound of 6 messages", n)
	}
	if u := usage["9"]; u.Requests != 2 {
		t.Errorf("the call after the failed summary compacted and answered, yet reports %d requests", u.Requests)
	}
}
