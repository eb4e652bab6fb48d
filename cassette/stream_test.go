package cassette_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/google/go-cmp/cmp"
)

// streamed is what a run streamed to its sink: the text of its messages
// and the arguments of its tool calls, each as the deltas joined.
func streamed(t *testing.T, p provider.Provider) (text, args string) {
	t.Helper()
	critic, err := subagent.FromReact("critic", "Reviews a draft.", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(critic))
	if err != nil {
		t.Fatal(err)
	}
	var deltas, calls strings.Builder
	sink := event.SinkFunc(func(e event.Event) {
		switch e.Type {
		case event.TextMessageContent:
			deltas.WriteString(e.Delta + "|")
		case event.ToolCallArgs:
			calls.WriteString(e.Delta + "|")
		}
	})
	if _, err := lead.Run(event.WithSink(context.Background(), sink), agent.Input{Text: "Review my draft."}); err != nil {
		t.Fatal(err)
	}
	return deltas.String(), calls.String()
}

// A streaming caller gets a recorded answer as a stream: recorded from a
// model that streams, as it streamed it; replayed, the same text and
// calls, a delta each.
func TestAStreamingCallerGetsTheAnswerStreamed(t *testing.T) {
	live := fake.NewProvider(
		fake.Call("critic", `{"task":"review: deputy is fast"}`).For("lead"),
		fake.Text("Fast, and says how fast.").For("critic"),
		fake.Text("The critic agrees.").For("lead"),
	)
	rec := cassette.Record(live)
	text, args := streamed(t, rec)
	if want := "Fast, |and |says |how |fast.|The |critic |agrees.|"; text != want {
		t.Errorf("recording streamed the text %q, want the live model's deltas %q", text, want)
	}
	if want := `{"task":"review:| deputy is fast"}|`; args != want {
		t.Errorf("recording streamed the arguments %q, want %q", args, want)
	}
	c, err := rec.Cassette()
	if err != nil {
		t.Fatal(err)
	}
	text, args = streamed(t, cassette.Replay(c))
	if diff := cmp.Diff("Fast, and says how fast.|The critic agrees.|", text); diff != "" {
		t.Errorf("replay streamed the text (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(`{"task":"review: deputy is fast"}|`, args); diff != "" {
		t.Errorf("replay streamed the arguments (-want +got):\n%s", diff)
	}

	// From a model that does not stream, the answer is streamed whole.
	plain := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage("Plainly so."), Usage: provider.Usage{Requests: 1}}, nil
	})
	hi := provider.Request{Messages: []provider.Message{provider.UserMessage("hi")}}
	plainRec := cassette.Record(plain)
	var got []provider.Delta
	resp, err := plainRec.Stream(context.Background(), hi, func(d provider.Delta) error { got = append(got, d); return nil })
	if err != nil || resp.Message.Content != "Plainly so." || len(got) != 1 || got[0].Text != "Plainly so." {
		t.Errorf("recorded from a plain model: %+v, %v; deltas %+v", resp, err, got)
	}

	// A caller that stops the stream gets its error back, and no answer.
	pc, err := plainRec.Cassette()
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("enough")
	resp, err = cassette.Replay(pc).Stream(context.Background(), hi, func(provider.Delta) error { return stop })
	if err != stop || resp.Message.Content != "" {
		t.Errorf("a stopped stream: %+v, %v; want no answer and the caller's error", resp, err)
	}
}
