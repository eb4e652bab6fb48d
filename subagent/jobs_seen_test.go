package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// driver is a tool of the lead that runs fn with the run's jobs.
func driver(s **subagent.Spawner, fn func(ctx context.Context, jobs *subagent.Jobs) (tool.Result, error)) tool.Tool {
	return tool.Func{Def: tool.Definition{Name: "drive", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) { return fn(ctx, (*s).Jobs(ctx)) }}
}

// The model call of the step that took a message links to the span the
// message was sent under, the link naming the message; the call before it
// links to nothing.
func TestJobMessageLinksItsSendToTheStepThatTookIt(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	began, sent := make(chan struct{}), make(chan struct{})
	p := fake.NewProvider(
		fake.Call("drive", `{}`).For("lead"),
		fake.Text("done").For("lead"),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			close(began)
			<-sent
			return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "l1", Name: "lookup", Arguments: json.RawMessage(`{}`)})}, nil
		}).For(subagent.DefaultForkName),
		fake.Text("found it").For(subagent.DefaultForkName),
	)
	var s *subagent.Spawner
	var receipt subagent.Receipt
	drive := driver(&s, func(ctx context.Context, jobs *subagent.Jobs) (tool.Result, error) {
		st, err := jobs.Start(ctx, subagent.Task{Task: "dig"})
		if err != nil {
			return tool.Result{}, err
		}
		<-began
		receipt, err = jobs.Send(ctx, st.ID, "look under the stairs")
		close(sent)
		if err != nil {
			return tool.Result{}, err
		}
		got, err := jobs.Wait(ctx, subagent.WaitFor{IDs: []string{st.ID}})
		if err != nil {
			return tool.Result{}, err
		}
		return got[0].Result, got[0].Err
	})
	reg, sp := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()}, drive)
	s = sp
	if _, err := lead(t, p, reg, agent.WithTracerProvider(tp)).Run(t.Context(), agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	var send sdktrace.ReadOnlySpan
	var chats []sdktrace.ReadOnlySpan // the fork's, in the order they started
	forkRun := map[string]bool{}      // span id of the fork's run
	for _, sp := range rec.Ended() {
		if sp.Name() == "invoke_agent "+subagent.DefaultForkName {
			forkRun[sp.SpanContext().SpanID().String()] = true
		}
	}
	for _, sp := range rec.Ended() {
		switch {
		case sp.Name() == "execute_tool drive":
			send = sp
		case strings.HasPrefix(sp.Name(), "chat") && forkRun[sp.Parent().SpanID().String()]:
			chats = append(chats, sp)
		}
	}
	if send == nil || len(chats) != 2 {
		t.Fatalf("the send's span %v, the fork's model calls %d: want one and two", send != nil, len(chats))
	}
	if chats[1].StartTime().Before(chats[0].StartTime()) {
		chats[0], chats[1] = chats[1], chats[0]
	}
	if l := chats[0].Links(); len(l) != 0 {
		t.Errorf("the first model call links to %v, want nothing: no message had been taken", l)
	}
	links := chats[1].Links()
	if len(links) != 1 || links[0].SpanContext.SpanID() != send.SpanContext().SpanID() || links[0].SpanContext.TraceID() != send.SpanContext().TraceID() {
		t.Fatalf("the second model call links to %+v, want the span of the send, %v", links, send.SpanContext().SpanID())
	}
	if got := links[0].Attributes; len(got) != 1 || got[0].Key != agent.AttrMessageID || got[0].Value.AsString() != receipt.MessageID {
		t.Errorf("the link says %v, want %s=%s", got, agent.AttrMessageID, receipt.MessageID)
	}
}

// Messages sent at once by many senders to one job are each delivered
// once, in the order they were queued (their receipts' Seq): each
// sender's in the order it sent them, the job's conversation, its final
// receipts and the events all agree, and each message is queued before
// it is delivered in the event stream.
func TestJobMessagesFromManySendersArriveOnceInOrder(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const senders, each = 8, 25
	const total = senders * each
	more := make(chan struct{}, 1) // a message was queued since the job last looked
	took := regexp.MustCompile(`Message (msg_\w+) from the agent that started you:\n(s\d+ #\d+)`)
	seen := 0
	answer := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		n := 0
		for _, m := range req.Messages {
			n += len(took.FindAllString(m.Content, -1))
		}
		if n >= total {
			return provider.Response{Message: provider.AssistantMessage("all read")}, nil
		}
		if n == seen {
			select { // nothing new: wait until something is sent
			case <-more:
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			}
		}
		seen = n
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "l", Name: "lookup", Arguments: json.RawMessage(`{}`)})}, nil
	}).For(subagent.DefaultForkName)
	replies := []fake.Reply{fake.Call("drive", `{}`).For("lead"), fake.Text("done").For("lead")}
	for range total + 2 {
		replies = append(replies, answer)
	}
	p := fake.NewProvider(replies...)

	var s *subagent.Spawner
	receipts := make([][]subagent.Receipt, senders)
	texts := map[string]string{} // message id → text
	var final subagent.JobResult
	drive := driver(&s, func(ctx context.Context, jobs *subagent.Jobs) (tool.Result, error) {
		st, err := jobs.Start(ctx, subagent.Task{Task: "read everything"})
		if err != nil {
			return tool.Result{}, err
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		errs := make(chan error, senders)
		for i := range senders {
			wg.Go(func() {
				for k := range each {
					text := fmt.Sprintf("s%d #%d", i, k)
					for {
						r, err := jobs.Send(ctx, st.ID, text)
						if errors.Is(err, nil) {
							receipts[i] = append(receipts[i], r)
							mu.Lock()
							texts[r.MessageID] = text
							mu.Unlock()
							break
						}
						if !strings.Contains(err.Error(), "messages are waiting") { // the box is full: wait for the job
							errs <- err
							return
						}
						time.Sleep(time.Millisecond)
					}
					select {
					case more <- struct{}{}:
					default:
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			return tool.Result{}, err
		}
		got, err := jobs.Wait(ctx, subagent.WaitFor{IDs: []string{st.ID}})
		if err != nil {
			return tool.Result{}, err
		}
		final = got[0]
		return got[0].Result, got[0].Err
	})
	reg, sp := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground(), subagent.WithChildMaxSteps(total + 2)}, drive)
	s = sp
	events := &recorder{}
	if _, err := lead(t, p, reg).Run(event.WithSink(t.Context(), events), agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	if final.Result.Content != "all read" {
		t.Fatalf("the job answered %q", final.Result.Content)
	}

	// Each message once, with its own place; each sender's in its order.
	bySeq := map[int]string{}
	for i, rs := range receipts {
		if len(rs) != each {
			t.Fatalf("sender %d got %d receipts, want %d", i, len(rs), each)
		}
		for k, r := range rs {
			if r.State != subagent.MessageQueued || bySeq[r.Seq] != "" || r.Seq < 1 || r.Seq > total {
				t.Fatalf("receipt %+v: want a queued message with a place of its own in 1..%d", r, total)
			}
			bySeq[r.Seq] = r.MessageID
			if k > 0 && r.Seq <= rs[k-1].Seq {
				t.Errorf("sender %d's message %d has place %d, after its message %d's %d", i, k, r.Seq, k-1, rs[k-1].Seq)
			}
		}
	}
	// The job read them in that order, once each.
	reqs := p.RequestsFor(subagent.DefaultForkName)
	var read []string
	for _, m := range reqs[len(reqs)-1].Messages {
		for _, f := range took.FindAllStringSubmatch(m.Content, -1) {
			if texts[f[1]] != f[2] {
				t.Fatalf("message %s reads %q, but %q was sent under that id", f[1], f[2], texts[f[1]])
			}
			read = append(read, f[1])
		}
	}
	if len(read) != total {
		t.Fatalf("the job read %d messages, want %d", len(read), total)
	}
	for i, id := range read {
		if bySeq[i+1] != id {
			t.Fatalf("the job read %s in place %d; the message queued in that place is %s", id, i+1, bySeq[i+1])
		}
	}
	// Its receipts, of the last 64 messages, say delivered, at steps that
	// never go back; the status counts the older ones.
	const listed = 64
	if len(final.Messages) != listed || final.Dropped != total-listed {
		t.Fatalf("the job's status has %d receipts and counts %d left out, want %d and %d", len(final.Messages), final.Dropped, listed, total-listed)
	}
	for i, r := range final.Messages {
		if seq := total - listed + i + 1; r.Seq != seq || r.MessageID != bySeq[seq] || r.State != subagent.MessageDelivered || r.Step < 1 || i > 0 && r.Step < final.Messages[i-1].Step {
			t.Fatalf("receipt %d: %+v (previous %+v): want delivered, in order", i, r, final.Messages[max(i-1, 0)])
		}
	}
	// The events: queued in order, delivered in order, never delivered
	// before queued.
	var queued, delivered []int
	for _, e := range events.of(event.Custom) {
		if e.Type != event.Custom || (e.Name != subagent.JobMessageEvent && e.Name != subagent.JobDeliveredEvent) {
			continue
		}
		var r subagent.Receipt
		if err := json.Unmarshal(e.Value, &r); err != nil {
			t.Fatal(err)
		}
		if e.Name == subagent.JobMessageEvent {
			queued = append(queued, r.Seq)
			continue
		}
		if len(queued) < r.Seq {
			t.Fatalf("message %d delivered before it was queued (%d queued so far)", r.Seq, len(queued))
		}
		delivered = append(delivered, r.Seq)
	}
	for _, got := range [][]int{queued, delivered} {
		if len(got) != total {
			t.Fatalf("%d events of messages, want %d", len(got), total)
		}
		for i, seq := range got {
			if seq != i+1 {
				t.Fatalf("the events name the messages in the order %v, want 1 to %d", got, total)
			}
		}
	}
}
