package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// On Temporal, as in process, the span of a background job's model call
// links to the span of the model call whose reply sent each message its
// step took, with the message's id: a trace shows which step of the job
// read which message, and which step of the lead sent it — whatever ids
// the models give their calls.
func TestJobMessageLinksToItsStepOnTemporal(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) {
			var ids atomic.Int64
			call := func(name, args string) provider.Message {
				return provider.AssistantMessage("", provider.ToolCall{ID: mode.id(ids.Add(1), 0), Name: name, Arguments: json.RawMessage(args)})
			}
			p := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
				rs := resultsOf(req)
				if firstUserOf(req) == "dig" {
					// It digs on until it reads the lead's message.
					if strings.Contains(req.Messages[len(req.Messages)-1].Content, "deeper") {
						return provider.AssistantMessage("dug deeper"), nil
					}
					return call("hold", `{}`), nil
				}
				switch len(rs) {
				case 0:
					return call(SpawnToolName, `{"task":"dig","background":true}`), nil
				case 1:
					return call(subagent.JobsToolName, `{"action":"send","job_id":"`+jobIDOf(rs[0])+`","message":"deeper"}`), nil
				case 2:
					return call(subagent.JobsToolName, `{"action":"wait","timeout_seconds":60}`), nil
				}
				return provider.AssistantMessage("done: " + rs[2]), nil
			}}
			var holds atomic.Int64
			hold := tool.Must(tool.New("hold", "Holds.", func(ctx context.Context, _ struct{}) (string, error) {
				holds.Add(1)
				return "held", nil
			}))
			reg, err := tool.NewRegistry(hold)
			if err != nil {
				t.Fatal(err)
			}
			rec := tracetest.NewSpanRecorder()
			rt := &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: reg, TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}
			env := newEnv(t, rt)
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"hold"}, Spawn: true, Background: true}, Text: "go"})
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.Answer, "dug deeper") {
				t.Fatalf("the lead answered %q: want the job's answer", out.Answer)
			}
			chats := map[string]sdktrace.ReadOnlySpan{} // by span id
			var linked []sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if !strings.HasPrefix(s.Name(), "chat") {
					continue
				}
				chats[s.SpanContext().SpanID().String()] = s
				if len(s.Links()) > 0 {
					linked = append(linked, s)
				}
			}
			if want := 4 + int(holds.Load()) + 1; len(chats) != want || len(linked) != 1 {
				t.Fatalf("%d chat spans, %d of them with links: want %d (the lead's 4, the job's %d), one linked", len(chats), len(linked), want, holds.Load()+1)
			}
			l := linked[0].Links()
			from, ok := chats[l[0].SpanContext.SpanID().String()]
			if len(l) != 1 || !ok || l[0].SpanContext.TraceID() != from.SpanContext().TraceID() {
				t.Fatalf("the job's call links to %+v: want the span of a model call of the tree", l)
			}
			var msgID string
			for _, a := range l[0].Attributes {
				if a.Key == agent.AttrMessageID {
					msgID = a.Value.AsString()
				}
			}
			// The link is from the lead's second call, whose reply sent the
			// message, to the job's call that read it.
			if msgID != "msg_1" || from.StartTime().After(linked[0].StartTime()) {
				t.Errorf("the link names message %q: want msg_1, from the call that sent it", msgID)
			}
		})
	}
}

// A message a program sends a job (SendToJob) came from no model call:
// the span of the job's call that takes it links to none, where it linked
// to the lead's last model call as if its reply had sent it.
func TestProgramMessageLinksToNoModelCall(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	leadHolding, leadRelease := make(chan struct{}), make(chan struct{})
	jobHolding, jobRelease := make(chan struct{}), make(chan struct{})
	p := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		if firstUserOf(req) == "dig" {
			if len(rs) == 0 {
				return provider.AssistantMessage("", provider.ToolCall{ID: "j", Name: "job_hold", Arguments: json.RawMessage(`{}`)}), nil
			}
			return provider.AssistantMessage("dug: " + req.Messages[len(req.Messages)-1].Content), nil
		}
		switch len(rs) {
		case 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: "s", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"dig","background":true}`)}), nil
		case 1:
			return provider.AssistantMessage("", provider.ToolCall{ID: "h", Name: "lead_hold", Arguments: json.RawMessage(`{}`)}), nil
		case 2:
			return provider.AssistantMessage("", provider.ToolCall{ID: "w", Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","timeout_seconds":60}`)}), nil
		}
		return provider.AssistantMessage("done: " + rs[2]), nil
	}}
	holder := func(name string, holding, release chan struct{}) tool.Tool {
		return tool.Must(tool.New(name, "Holds.", func(ctx context.Context, _ struct{}) (string, error) {
			close(holding)
			select {
			case <-release:
				return "held", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}))
	}
	reg, err := tool.NewRegistry(holder("lead_hold", leadHolding, leadRelease), holder("job_hold", jobHolding, jobRelease))
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	queue := fmt.Sprintf("deputy-go-send-link-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: reg, TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	id := "lead-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, AgentWorkflowName,
		RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"lead_hold", "job_hold"}, Spawn: true, Background: true}, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	<-jobHolding
	<-leadHolding // the lead's last model call made, its reply calling lead_hold
	if _, err := SendToJob(ctx, c, id, "job_1", "deeper"); err != nil {
		t.Fatal(err)
	}
	close(jobRelease)
	close(leadRelease)
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.Answer, "deeper") {
		t.Fatalf("the lead answered %q: want the job's answer, having read the message", out.Answer)
	}
	for _, s := range rec.Ended() {
		if strings.HasPrefix(s.Name(), "chat") && len(s.Links()) > 0 {
			t.Errorf("model call span %s links to %+v: a program's message was sent by no model call", s.Name(), s.Links())
		}
	}
}
