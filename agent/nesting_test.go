package agent_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
)

// Every run, however it ends, leaves no step, message or tool call open,
// sends no empty delta, and links a tool call to a message only when that
// message was sent.
func TestRunEventsAreWellNested(t *testing.T) {
	toolReply := provider.Response{
		Message:    provider.AssistantMessage("", provider.ToolCall{Name: "weather", Arguments: []byte(`{"city":"Porto"}`)}),
		StopReason: provider.StopToolUse,
	}
	answer := provider.Response{Message: provider.AssistantMessage("Sunny."), StopReason: provider.StopEndTurn}
	plain := func(replies ...provider.Response) provider.Provider {
		n := 0
		return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			r := replies[n%len(replies)]
			n++
			return r, nil
		})
	}
	tests := []struct {
		name    string
		p       provider.Provider
		opts    []agent.Option
		wantErr bool
	}{
		{"plain provider, tool call without text", plain(toolReply, answer), nil, false},
		{"streamed, tool call without text", fake.NewProvider(fake.Call("weather", `{"city":"Porto"}`), fake.Text("Sunny.")), nil, false},
		{"streamed, empty arguments", fake.NewProvider(fake.Call("weather", ``), fake.Text("Sunny.")), nil, false},
		{"stream fails mid-text", streamer{deltas: []provider.Delta{{Text: "Sun"}}, err: errors.New("connection reset")}, nil, true},
		{"stream panics mid-text", panicky{streamer{deltas: []provider.Delta{{Text: "Sun"}}}}, nil, true},
		{"stream fails mid-call", streamer{deltas: []provider.Delta{{ToolCall: provider.ToolCallDelta{Index: 0, Name: "weather", Arguments: `{"ci`}}}, err: errors.New("connection reset")}, nil, true},
		{"max steps", plain(toolReply), []agent.Option{agent.WithMaxSteps(2)}, true},
		{"model error", fake.NewProvider(fake.Error(errors.New("overloaded"))), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := append([]agent.Option{agent.WithTools(weatherToolFor(t))}, tt.opts...)
			a, err := agent.NewReact(tt.p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			rec := &eventcheck.Recorder{}
			_, err = a.Run(event.WithSink(context.Background(), rec), agent.Input{Text: "weather?"})
			if (err != nil) != tt.wantErr {
				t.Fatalf("run error %v, want error: %v", err, tt.wantErr)
			}
			got := rec.Events()
			if problems := eventcheck.Check(got, eventcheck.Options{}); len(problems) > 0 {
				t.Errorf("events do not conform:\n%s", strings.Join(problems, "\n"))
			}
			// Even a failed run closes everything it opened: a sub-agent's
			// RUN_ERROR is not forwarded, so nothing else would.
			open := map[string]int{}
			for _, e := range got {
				switch e.Type {
				case event.StepStarted:
					open["step "+e.StepName]++
				case event.StepFinished:
					open["step "+e.StepName]--
				case event.TextMessageStart:
					open["text "+e.MessageID]++
				case event.TextMessageEnd:
					open["text "+e.MessageID]--
				case event.ToolCallStart:
					open["call "+e.ToolCallID]++
				case event.ToolCallEnd:
					open["call "+e.ToolCallID]--
				}
			}
			for k, n := range open {
				if n != 0 {
					t.Errorf("%s left open (%d)", k, n)
				}
			}
			// The ids the events announce are the ids the results answer.
			for _, e := range got {
				if e.Type == event.ToolCallStart && e.ToolCallID == "" {
					t.Error("TOOL_CALL_START without an id")
				}
			}
		})
	}
}

// panicky is a streaming provider that panics after its deltas.
type panicky struct{ streamer }

func (p panicky) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	_, _ = p.streamer.Stream(ctx, req, onDelta)
	panic("provider bug")
}
