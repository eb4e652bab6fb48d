package a2a_test

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/tool"
)

// wordsAgent is an A2A agent that is not deputy's: it asks in words, or
// fails with a reason, in its task's status message.
type wordsAgent struct{ state sdk.TaskState }

func (w wordsAgent) Execute(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) {
		if !yield(sdk.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		text := "Which account should pay?"
		if w.state == sdk.TaskStateFailed {
			text = "the ledger is closed"
		}
		yield(sdk.NewStatusUpdateEvent(ec, w.state, sdk.NewMessageForTask(sdk.MessageRoleAgent, ec, sdk.NewTextPart(text))), nil)
	}
}

func (wordsAgent) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) {
		yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateCanceled, nil), nil)
	}
}

// serveWords serves a wordsAgent ending its first message in state.
func serveWords(t *testing.T, state sdk.TaskState, streaming bool) *a2a.Remote {
	t.Helper()
	card := &sdk.AgentCard{Name: "words", Description: "Speaks in words.", Version: "1.0.0", Capabilities: sdk.AgentCapabilities{Streaming: streaming}}
	hs := httptest.NewUnstartedServer(nil)
	url := "http://" + hs.Listener.Addr().String()
	card.SupportedInterfaces = []*sdk.AgentInterface{sdk.NewAgentInterface(url, sdk.TransportProtocolJSONRPC)}
	mux := http.NewServeMux()
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("/", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(wordsAgent{state})))
	hs.Config.Handler = mux
	hs.Start()
	t.Cleanup(hs.Close)
	r, err := a2a.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// The words of an agent that is not deputy's reach the caller: the
// question it asks in its status message becomes the question's message,
// and the reason it fails becomes part of the error — streamed or polled.
func TestRemoteKeepsTheStatusWords(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		r := serveWords(t, sdk.TaskStateInputRequired, streaming)
		_, err := r.Run(context.Background(), agent.Input{Text: "pay"})
		var in *tool.Interrupted
		if !errors.As(err, &in) || len(in.Interrupts) != 1 {
			t.Fatalf("streaming %v: %v, want one question", streaming, err)
		}
		if got := in.Interrupts[0].Message; got != "Which account should pay?" {
			t.Errorf("streaming %v: the question says %q, want the agent's words", streaming, got)
		}

		r = serveWords(t, sdk.TaskStateFailed, streaming)
		_, err = r.Run(context.Background(), agent.Input{Text: "pay"})
		if err == nil || !strings.Contains(err.Error(), "the ledger is closed") {
			t.Errorf("streaming %v: %v, want the agent's reason for failing", streaming, err)
		}
	}
}
