package agui_test

import (
	"io"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/fake"
)

// A traced agent served over AG-UI names the request's thread as the
// conversation of its spans (gen_ai.conversation.id).
func TestTraceConversationIsTheThread(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	a, err := agent.NewReact(fake.NewProvider(fake.Text("hi")), agent.WithName("lead"), agent.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, must(t)(agui.New(a)))
	resp := post(t, srv.URL, okBody)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	got := map[string]string{}
	for _, s := range spans.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == "gen_ai.conversation.id" {
				got[s.Name()] = kv.Value.AsString()
			}
		}
	}
	if got["invoke_agent lead"] != "t1" || got["chat"] != "t1" {
		t.Errorf("gen_ai.conversation.id by span: %v, want t1 on the run and chat spans", got)
	}
}
