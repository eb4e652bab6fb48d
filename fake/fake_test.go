package fake_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
)

func req(text string) provider.Request {
	return provider.Request{Messages: []provider.Message{provider.UserMessage(text)}}
}

// as returns a context in which the agent named name is running.
func as(ctx context.Context, name string) context.Context {
	return run.Start(ctx, "run_"+name, name, 0)
}

func TestScript(t *testing.T) {
	errDown := &provider.Error{Provider: "fake", Kind: provider.KindTransient, StatusCode: 503}
	p := fake.NewProvider(
		fake.Text("hello"),
		fake.Call("search", `{"q":"go"}`),
		fake.Calls(
			provider.ToolCall{Name: "a", Arguments: json.RawMessage(`{}`)},
			provider.ToolCall{ID: "mine", Name: "b", Arguments: json.RawMessage(`{"x":1}`)},
		).Saying("Let me check."),
		fake.Error(errDown),
		fake.Respond(func(ctx context.Context, r provider.Request) (provider.Response, error) {
			return provider.Response{Message: provider.AssistantMessage("you said " + r.Messages[0].Content), Model: "echo"}, nil
		}),
		fake.Text("cheap").WithUsage(provider.Usage{InputTokens: 1, Requests: 1}),
	)
	if p.Remaining() != 6 {
		t.Errorf("Remaining() = %d, want 6", p.Remaining())
	}
	type step struct {
		resp provider.Response
		err  error
	}
	var got []step
	for i := range 6 {
		resp, err := p.Complete(t.Context(), req(fmt.Sprint("q", i)))
		got = append(got, step{resp, err})
	}
	// The ids count up behind the provider's random tag.
	prefix := "call_?_"
	if calls := got[1].resp.Message.ToolCalls; len(calls) == 1 && idShape.MatchString(calls[0].ID) {
		prefix = strings.TrimSuffix(calls[0].ID, "1")
	}
	want := []step{
		{resp: provider.Response{
			Message:    provider.AssistantMessage("hello"),
			Usage:      provider.Usage{InputTokens: 1, OutputTokens: 2, Requests: 1},
			StopReason: provider.StopEndTurn, Model: "fake",
		}},
		{resp: provider.Response{
			Message:    provider.AssistantMessage("", provider.ToolCall{ID: prefix + "1", Name: "search", Arguments: json.RawMessage(`{"q":"go"}`)}),
			Usage:      provider.Usage{InputTokens: 1, OutputTokens: 4, Requests: 1},
			StopReason: provider.StopToolUse, Model: "fake",
		}},
		{resp: provider.Response{
			Message: provider.AssistantMessage("Let me check.",
				provider.ToolCall{ID: prefix + "2", Name: "a", Arguments: json.RawMessage(`{}`)},
				provider.ToolCall{ID: "mine", Name: "b", Arguments: json.RawMessage(`{"x":1}`)}),
			Usage:      provider.Usage{InputTokens: 1, OutputTokens: 6, Requests: 1}, // 13 + 3 + 8 bytes
			StopReason: provider.StopToolUse, Model: "fake",
		}},
		{err: errDown},
		{resp: provider.Response{Message: provider.AssistantMessage("you said q4"), Model: "echo"}},
		{resp: provider.Response{
			Message:    provider.AssistantMessage("cheap"),
			Usage:      provider.Usage{InputTokens: 1, Requests: 1},
			StopReason: provider.StopEndTurn, Model: "fake",
		}},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(step{}), cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
		t.Errorf("replies (-want +got):\n%s", diff)
	}
	if p.Calls() != 6 || p.Remaining() != 0 || len(p.Requests()) != 6 {
		t.Errorf("Calls() = %d, Remaining() = %d, %d requests; want 6, 0, 6", p.Calls(), p.Remaining(), len(p.Requests()))
	}
}

// The same script played twice gives the same replies and usage; the ids
// of its tool calls count up the same way, but two providers never hand out
// the same id (a conversation may outlive a provider).
func TestScriptIsDeterministic(t *testing.T) {
	play := func() []provider.Response {
		p := fake.NewProvider(fake.Call("a", `{}`), fake.Calls(provider.ToolCall{Name: "b"}, provider.ToolCall{Name: "c"}), fake.Text("done"))
		var out []provider.Response
		for range 3 {
			r, err := p.Complete(t.Context(), req("hi"))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	first, second := play(), play()
	seen := map[string]bool{}
	for _, plays := range [][]provider.Response{first, second} {
		for _, r := range plays {
			for i, c := range r.Message.ToolCalls {
				if !idShape.MatchString(c.ID) || seen[c.ID] {
					t.Errorf("tool call id %q: want call_<tag>_<n>, never seen before", c.ID)
				}
				seen[c.ID] = true
				r.Message.ToolCalls[i].ID = c.ID[strings.LastIndexByte(c.ID, '_'):]
			}
		}
	}
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("two plays differ beyond their ids' tags (-first +second):\n%s", diff)
	}
}

// idShape is the shape of an id the fake hands out.
var idShape = regexp.MustCompile(`^call_[0-9a-z]{6}_[0-9]+$`)

// untag drops the random tag from the ids of r's tool calls, for comparing
// the replies of two providers.
func untag(r provider.Response) provider.Response {
	r.Message.ToolCalls = slices.Clone(r.Message.ToolCalls)
	for i, c := range r.Message.ToolCalls {
		if idShape.MatchString(c.ID) {
			r.Message.ToolCalls[i].ID = "call_" + c.ID[strings.LastIndexByte(c.ID, '_'):]
		}
	}
	return r
}

// A script's tool calls are copied per call: giving them ids never changes
// the script, so Loop hands out fresh ids each round.
func TestLoopAndDontRecord(t *testing.T) {
	p := fake.NewProvider(fake.Call("a", `{}`), fake.Text("done")).Loop().DontRecord()
	var ids []string
	for range 6 {
		r, err := p.Complete(t.Context(), req("hi"))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Message.ToolCalls {
			ids = append(ids, c.ID)
		}
	}
	if len(ids) != 3 {
		t.Fatalf("ids %v, want 3", ids)
	}
	tag := strings.TrimSuffix(ids[0], "_1")
	if diff := cmp.Diff([]string{tag + "_1", tag + "_2", tag + "_3"}, ids); diff != "" || !idShape.MatchString(ids[0]) {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	if len(p.Requests()) != 0 || p.Calls() != 6 {
		t.Errorf("DontRecord kept %d requests (Calls %d)", len(p.Requests()), p.Calls())
	}
}

func TestRecording(t *testing.T) {
	p := fake.NewProvider(fake.Text("1"), fake.Text("2"), fake.Text("3"))
	r1 := provider.Request{System: "be brief", Messages: []provider.Message{provider.UserMessage("one")}}
	r2 := req("two")
	if _, err := p.Complete(as(t.Context(), "lead"), r1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Complete(as(t.Context(), "researcher"), r2); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Complete(t.Context(), r2); err != nil {
		t.Fatal(err)
	}
	want := []fake.Request{{Agent: "lead", Request: r1}, {Agent: "researcher", Request: r2}, {Agent: "", Request: r2}}
	got := p.Requests()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Requests (-want +got):\n%s", diff)
	}
	got[0].Agent = "changed"
	if p.Requests()[0].Agent != "lead" {
		t.Error("Requests returned the provider's own slice")
	}
	if diff := cmp.Diff([]provider.Request{r2}, p.RequestsFor("researcher")); diff != "" {
		t.Errorf("RequestsFor (-want +got):\n%s", diff)
	}
	if got := p.RequestsFor("nobody"); got != nil {
		t.Errorf("RequestsFor(nobody) = %v", got)
	}
}

func TestRouting(t *testing.T) {
	p := fake.NewProvider(
		fake.Call("researcher", `{"task":"find X"}`).For("lead"),
		fake.Text("X is 42").For("researcher"),
		fake.Text("The answer is 42.").For("lead"),
		fake.Text("shared 1"),
		fake.Text("shared 2"),
	)
	tests := []struct {
		agent string
		want  string
	}{
		{"lead", "call researcher"},
		{"researcher", "X is 42"},
		{"researcher", "shared 1"}, // its own replies are used up: it takes a shared one
		{"lead", "The answer is 42."},
		{"", "shared 2"},
	}
	for i, tt := range tests {
		r, err := p.Complete(as(t.Context(), tt.agent), req("go"))
		if err != nil {
			t.Fatalf("call %d by %q: %v", i, tt.agent, err)
		}
		got := r.Message.Content
		if len(r.Message.ToolCalls) > 0 {
			got = "call " + r.Message.ToolCalls[0].Name
		}
		if got != tt.want {
			t.Errorf("call %d by %q: got %q, want %q", i, tt.agent, got, tt.want)
		}
	}
}

func TestExhausted(t *testing.T) {
	tests := []struct {
		name    string
		p       *fake.Provider
		agent   string
		msgs    []provider.Message
		wantErr string
	}{
		{
			name:    "empty script",
			p:       fake.NewProvider(),
			msgs:    []provider.Message{provider.UserMessage("hello")},
			wantErr: `fake: script exhausted: call 1 by agent "" (last message: "hello") has no reply left: add one to the script`,
		},
		{
			name:    "zero value",
			p:       &fake.Provider{},
			agent:   "lead",
			wantErr: `fake: script exhausted: call 1 by agent "lead" (last message: "") has no reply left: add one to the script`,
		},
		{
			name:    "replies reserved for others",
			p:       fake.NewProvider(fake.Text("a").For("writer"), fake.Text("b").For("writer"), fake.Text("c").For("critic")),
			agent:   "lead",
			msgs:    []provider.Message{provider.UserMessage("x"), provider.ToolMessage("call_1", "result", false)},
			wantErr: `fake: script exhausted: call 1 by agent "lead" (last message: "result") has no reply left (replies are left only for "critic" (1), "writer" (2)): add one to the script`,
		},
		{
			// The message is cut on a character boundary: 59 bytes of a and
			// then a two-byte é straddling byte 60.
			name:    "long last message",
			p:       fake.NewProvider(),
			msgs:    []provider.Message{provider.UserMessage(strings.Repeat("a", 59) + "é and more")},
			wantErr: `(last message: "` + strings.Repeat("a", 59) + `…")`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.agent != "" {
				ctx = as(ctx, tt.agent)
			}
			_, err := tt.p.Complete(ctx, provider.Request{Messages: tt.msgs})
			if !errors.Is(err, fake.ErrScriptExhausted) {
				t.Fatalf("error %v, want ErrScriptExhausted", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error:\n%s\nwant it to contain:\n%s", err, tt.wantErr)
			}
		})
	}
}

func TestAdd(t *testing.T) {
	var p fake.Provider
	p.Add(fake.Text("later"))
	r, err := p.Complete(t.Context(), req("hi"))
	if err != nil || r.Message.Content != "later" {
		t.Errorf("Complete = %+v, %v", r, err)
	}
}

func TestDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(fake.Text("slow").After(time.Second), fake.Text("never").After(time.Hour))
		start := time.Now()
		r, err := p.Complete(t.Context(), req("hi"))
		if err != nil || r.Message.Content != "slow" {
			t.Fatalf("Complete = %+v, %v", r, err)
		}
		if got := time.Since(start); got != time.Second {
			t.Errorf("the reply came after %v, want 1s", got)
		}

		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Minute, cancel)
		start = time.Now()
		_, err = p.Complete(ctx, req("hi"))
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
		if got := time.Since(start); got != time.Minute {
			t.Errorf("the cancelled call returned after %v, want 1m (when its context ended)", got)
		}

		ctx, cancel2 := context.WithTimeout(t.Context(), time.Millisecond)
		defer cancel2()
		p.Add(fake.Text("late").After(time.Second))
		if _, err := p.Complete(ctx, req("hi")); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v, want context.DeadlineExceeded", err)
		}
	})
}

func TestCompleteCancelledBeforeTheCall(t *testing.T) {
	p := fake.NewProvider(fake.Text("kept"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := p.Complete(ctx, req("hi")); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if p.Remaining() != 1 || p.Calls() != 0 {
		t.Errorf("a call refused for its context used the script: Remaining %d, Calls %d", p.Remaining(), p.Calls())
	}
}

func TestConcurrentComplete(t *testing.T) {
	const n = 50
	var replies []fake.Reply
	var want []string
	for i := range n {
		replies = append(replies, fake.Text(fmt.Sprint("r", i)))
		want = append(want, fmt.Sprint("r", i))
	}
	p := fake.NewProvider(replies...)
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := p.Complete(context.Background(), req("hi"))
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = r.Message.Content
		})
	}
	wg.Wait()
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("each reply once (-want +got):\n%s", diff)
	}
	if p.Calls() != n || len(p.Requests()) != n || p.Remaining() != 0 {
		t.Errorf("Calls %d, %d requests, Remaining %d", p.Calls(), len(p.Requests()), p.Remaining())
	}
}

func TestUsage(t *testing.T) {
	r := provider.Request{
		System:   "1234",                                                                                                                                            // 4
		Messages: []provider.Message{provider.UserMessage("12345"), provider.AssistantMessage("", provider.ToolCall{Name: "ab", Arguments: json.RawMessage(`{}`)})}, // 5 + 4
		Tools:    []provider.ToolDef{{Name: "ab", Description: "c", Parameters: json.RawMessage(`{}`)}},                                                             // 5
	}
	reply := provider.AssistantMessage("12345", provider.ToolCall{Name: "x", Arguments: json.RawMessage(`{}`)}) // 5 + 3
	want := provider.Usage{InputTokens: 5, OutputTokens: 2, Requests: 1}                                        // 18 bytes in, 8 out
	if diff := cmp.Diff(want, fake.Usage(r, reply)); diff != "" {
		t.Errorf("Usage (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(provider.Usage{Requests: 1}, fake.Usage(provider.Request{}, provider.Message{})); diff != "" {
		t.Errorf("Usage of nothing (-want +got):\n%s", diff)
	}
}

// stream calls p.Stream and returns the deltas it passed on and its result.
func stream(ctx context.Context, p *fake.Provider, r provider.Request) ([]provider.Delta, provider.Response, error) {
	var out []provider.Delta
	resp, err := p.Stream(ctx, r, func(d provider.Delta) error {
		out = append(out, d)
		return nil
	})
	return out, resp, err
}

func TestStream(t *testing.T) {
	script := []fake.Reply{
		fake.Text("It is sunny in Lisbon."),
		fake.Calls(
			provider.ToolCall{Name: "weather", Arguments: json.RawMessage(`{"city":"Lisbon"}`)},
			provider.ToolCall{Name: "time", Arguments: json.RawMessage(`{}`)},
		).Saying("Checking."),
	}
	streamed := fake.NewProvider(script...)
	plain := fake.NewProvider(script...)
	for range script {
		want, err := plain.Complete(t.Context(), req("hi"))
		if err != nil {
			t.Fatal(err)
		}
		deltas, got, err := stream(t.Context(), streamed, req("hi"))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(untag(want), untag(got)); diff != "" {
			t.Errorf("streamed response differs from Complete's (-complete +stream):\n%s", diff)
		}
		var text strings.Builder
		args := map[int]string{}
		ids := map[int]string{}
		for _, d := range deltas {
			text.WriteString(d.Text)
			if d.HasToolCall() {
				tc := d.ToolCall
				args[tc.Index] += tc.Arguments
				if tc.ID != "" {
					ids[tc.Index] = tc.ID
				}
			}
		}
		if text.String() != want.Message.Content {
			t.Errorf("text deltas join to %q, want %q", text.String(), want.Message.Content)
		}
		for i, c := range want.Message.ToolCalls {
			if args[i] != string(c.Arguments) || ids[i] != got.Message.ToolCalls[i].ID {
				t.Errorf("call %d: deltas give id %q args %q, want %q %s", i, ids[i], args[i], c.ID, c.Arguments)
			}
		}
	}
}

func TestStreamStopsAndFails(t *testing.T) {
	p := fake.NewProvider(fake.Text("one two three"))
	stop := errors.New("seen enough")
	n := 0
	_, err := p.Stream(t.Context(), req("hi"), func(provider.Delta) error {
		n++
		return stop
	})
	if n != 1 || !errors.Is(err, stop) {
		t.Errorf("got %d deltas and error %v after the callback failed; want 1 and its error", n, err)
	}
	// The script is exhausted now: the stream ends with that error.
	deltas, _, err := stream(t.Context(), p, req("hi"))
	if !errors.Is(err, fake.ErrScriptExhausted) || len(deltas) != 0 {
		t.Errorf("stream of an exhausted script: %d deltas, error %v", len(deltas), err)
	}

	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(fake.Text("too late").After(time.Hour))
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		deltas, _, err := stream(ctx, p, req("hi"))
		if !errors.Is(err, context.Canceled) || len(deltas) != 0 {
			t.Errorf("cancelled stream: %d deltas, error %v", len(deltas), err)
		}
	})

	// Without a callback, Stream answers as Complete does.
	p = fake.NewProvider(fake.Text("quiet"))
	if resp, err := p.Stream(t.Context(), req("hi"), nil); err != nil || resp.Message.Content != "quiet" {
		t.Errorf("Stream with a nil callback: %+v, %v", resp, err)
	}
}

func TestProviderInterfaces(t *testing.T) {
	var p any = fake.NewProvider()
	if _, ok := p.(provider.Provider); !ok {
		t.Error("*fake.Provider is not a provider.Provider")
	}
	if _, ok := p.(provider.Streamer); !ok {
		t.Error("*fake.Provider is not a provider.Streamer")
	}
}

// A named provider says which provider and model it is, so that usage
// reports and traces can tell two fakes apart; an unnamed one is "fake".
func TestNamed(t *testing.T) {
	var _ provider.Namer = (*fake.Provider)(nil)
	for _, tc := range []struct {
		p                   *fake.Provider
		wantName, wantModel string
	}{
		{fake.NewProvider(fake.Text("hi")), "fake", "fake"},
		{fake.NewProvider(fake.Text("hi")).Named("alpha", "alpha-1"), "alpha", "alpha-1"},
	} {
		resp, err := tc.p.Complete(context.Background(), req("hello"))
		if err != nil {
			t.Fatal(err)
		}
		if tc.p.Name() != tc.wantName || resp.Model != tc.wantModel {
			t.Errorf("Name() = %q, reply model %q; want %q, %q", tc.p.Name(), resp.Model, tc.wantName, tc.wantModel)
		}
	}
}

// WithUsage on a reply a function computes reports the usage it names, as
// on any other reply, rather than being dropped.
func TestRespondWithUsage(t *testing.T) {
	want := provider.Usage{InputTokens: 60, OutputTokens: 5, Requests: 1}
	p := fake.NewProvider(fake.Respond(func(context.Context, provider.Request) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage("computed")}, nil
	}).WithUsage(want))
	resp, err := p.Complete(t.Context(), provider.Request{Messages: []provider.Message{provider.UserMessage("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage != want || resp.Message.Content != "computed" {
		t.Errorf("got %q with usage %+v, want %q with %+v", resp.Message.Content, resp.Usage, "computed", want)
	}
}
