package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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

// snapshotAgent speaks A2A's JSON-RPC binding as the JavaScript SDK's
// agents do: it asks which account pays, and its stream of the answer
// starts with the task as it stood, still waiting for input (the SDK has
// every execution publish the task first), before it pays.
func snapshotAgent(t *testing.T) string {
	t.Helper()
	hs := httptest.NewUnstartedServer(nil)
	url := "http://" + hs.Listener.Addr().String()
	card := &sdk.AgentCard{Name: "snapshot", Description: "Asks, then pays.", Version: "1.0.0",
		Capabilities:        sdk.AgentCapabilities{Streaming: true},
		SupportedInterfaces: []*sdk.AgentInterface{sdk.NewAgentInterface(url, sdk.TransportProtocolJSONRPC)}}
	mux := http.NewServeMux()
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	mux.HandleFunc("POST /{$}", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Message struct {
					TaskID    string `json:"taskId"`
					ContextID string `json:"contextId"`
					Parts     []struct {
						Text string `json:"text"`
					} `json:"parts"`
				} `json:"message"`
			} `json:"params"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Method != "SendStreamingMessage" {
			http.Error(w, "only SendStreamingMessage", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(result string) {
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}\n\n", req.ID, result)
		}
		m := req.Params.Message
		if m.TaskID == "" {
			send(`{"task":{"id":"t1","contextId":"c1","status":{"state":"TASK_STATE_SUBMITTED"}}}`)
			send(`{"statusUpdate":{"taskId":"t1","contextId":"c1","status":{"state":"TASK_STATE_INPUT_REQUIRED",` +
				`"message":{"messageId":"q1","role":"ROLE_AGENT","parts":[{"text":"Which account should pay?"}]}}}}`)
			return
		}
		if m.TaskID != "t1" || m.ContextID != "c1" || len(m.Parts) != 1 {
			t.Errorf("the answer came on task %q, context %q, with %d parts; want t1, c1 and one part", m.TaskID, m.ContextID, len(m.Parts))
		}
		account, _ := json.Marshal("paid from " + m.Parts[0].Text)
		send(`{"task":{"id":"t1","contextId":"c1","status":{"state":"TASK_STATE_INPUT_REQUIRED",` +
			`"message":{"messageId":"q1","role":"ROLE_AGENT","parts":[{"text":"Which account should pay?"}]}}}}`)
		if m.Parts[0].Text == "later" {
			return // no answer: the task still waits, and the stream ends
		}
		send(`{"statusUpdate":{"taskId":"t1","contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}}`)
		send(`{"artifactUpdate":{"taskId":"t1","contextId":"c1","artifact":{"artifactId":"reply","parts":[{"text":` + string(account) + `}]},"lastChunk":true}}`)
		send(`{"statusUpdate":{"taskId":"t1","contextId":"c1","status":{"state":"TASK_STATE_COMPLETED"}}}`)
	})
	hs.Config.Handler = mux
	hs.Start()
	t.Cleanup(hs.Close)
	return url
}

// The stream of an answer may start with the task as it stood, still
// waiting for input: that is not the agent asking again, unless the
// stream ends there. The answer goes on the task that asked, which
// completes with it.
func TestRemoteAnswerStreamStartsWithTheWaitingTask(t *testing.T) {
	r, err := a2a.Connect(context.Background(), snapshotAgent(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sub, err := r.Tool()
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	lead := delegator(t, sub.Definition().Name, idModes[0].id, &calls, sub)
	run := journaledRun(t, lead, "pay")
	_, err = run(context.Background())
	var in *tool.Interrupted
	if !errors.As(err, &in) || len(in.Interrupts) != 1 || in.Interrupts[0].Message != "Which account should pay?" {
		t.Fatalf("%v, want the agent's question", err)
	}
	answer := func(in *tool.Interrupted, text string) context.Context {
		payload, _ := json.Marshal(text)
		ctx, err := tool.Resume(context.Background(), in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: payload})
		if err != nil {
			t.Fatal(err)
		}
		return ctx
	}
	_, err = run(answer(in, "later"))
	var again *tool.Interrupted
	if !errors.As(err, &again) || len(again.Interrupts) != 1 || again.Interrupts[0].Message != "Which account should pay?" || again.Interrupts[0].ID == in.Interrupts[0].ID {
		t.Fatalf("after an answer the agent did not take: %v, want its question asked again", err)
	}
	out, err := run(answer(again, "savings"))
	if err != nil {
		t.Fatalf("the resumed run: %v", err)
	}
	if want := "lead: paid from savings"; out.Answer != want {
		t.Errorf("answer %q, want %q", out.Answer, want)
	}
}
