package providertest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/deputy-go/deputy/provider"
)

// NewFunc returns the provider under test for one check, answering the
// model calls it makes from s. It is called once per check, with that
// check's t; whatever it starts (a server, say) it stops with t.Cleanup.
type NewFunc func(t *testing.T, s *Script) provider.Provider

// promptly bounds how long a provider may take to return once its context
// is cancelled.
const promptly = 5 * time.Second

// Run checks the provider that newProvider builds against deputy's provider
// contract, each check in a subtest of t. See the package documentation for
// the checks and for how to drive a provider from a Script.
func Run(t *testing.T, newProvider NewFunc) {
	t.Helper()
	t.Run("Text", func(t *testing.T) { testText(t, newProvider) })
	t.Run("ToolRoundTrip", func(t *testing.T) { testToolRoundTrip(t, newProvider) })
	t.Run("ParallelToolCalls", func(t *testing.T) { testParallelToolCalls(t, newProvider) })
	t.Run("Conversation", func(t *testing.T) { testConversation(t, newProvider) })
	t.Run("Errors", func(t *testing.T) { testErrors(t, newProvider) })
	t.Run("Cancel", func(t *testing.T) { testCancel(t, newProvider) })
	t.Run("Stream", func(t *testing.T) { testStream(t, newProvider) })
}

// cmpOpts compares vocabulary values: JSON by meaning, empty like nil.
var cmpOpts = cmp.Options{
	cmp.FilterValues(func(a, b json.RawMessage) bool { return json.Valid(a) && json.Valid(b) },
		cmp.Transformer("JSON", func(m json.RawMessage) any {
			var v any
			_ = json.Unmarshal(m, &v)
			return v
		})),
	cmpopts.EquateEmpty(),
}

// requestOpts compares a request as sent with the request as the model
// received it: by System, Messages and Tools. IsError is ignored because not
// every API can carry it (Chat Completions has no such flag).
var requestOpts = cmp.Options{
	cmpOpts,
	cmpopts.IgnoreFields(provider.Request{}, "Model", "MaxTokens", "Temperature", "ResponseSchema"),
	cmpopts.IgnoreFields(provider.Message{}, "IsError"),
}

// responseOpts compares responses, leaving out the model name, which each
// backend reports its own way.
var responseOpts = cmp.Options{cmpOpts, cmpopts.IgnoreFields(provider.Response{}, "Model")}

func setup(t *testing.T, newProvider NewFunc, replies ...Reply) (provider.Provider, *Script) {
	t.Helper()
	s := NewScript(t, replies...)
	p := newProvider(t, s)
	if p == nil {
		t.Fatal("providertest: the NewFunc returned a nil provider")
	}
	t.Cleanup(func() {
		if t.Failed() || t.Skipped() {
			return
		}
		if got := len(s.Received()); got != len(s.replies) {
			t.Errorf("providertest: the provider made %d model calls; the check scripted %d", got, len(s.replies))
		}
	})
	return p, s
}

func complete(t *testing.T, p provider.Provider, req provider.Request) provider.Response {
	t.Helper()
	resp, err := p.Complete(t.Context(), req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	return resp
}

func checkResponse(t *testing.T, what string, got provider.Response, r Reply) {
	t.Helper()
	if diff := cmp.Diff(r.Response(), got, responseOpts); diff != "" {
		t.Errorf("%s: response mismatch (-want +got):\n%s", what, diff)
	}
	if got.Usage.Tokens() <= 0 {
		t.Errorf("%s: Usage = %v; want the tokens the model reported", what, got.Usage)
	}
}

func checkReceived(t *testing.T, s *Script, i int, want provider.Request) {
	t.Helper()
	got := s.Received()
	if len(got) <= i {
		t.Fatalf("the model received %d requests; want at least %d", len(got), i+1)
	}
	if diff := cmp.Diff(want, got[i], requestOpts); diff != "" {
		t.Errorf("request %d as the model received it (-sent +received):\n%s", i, diff)
	}
}

func question(text string) provider.Request {
	return provider.Request{
		System:   "Answer in one sentence.",
		Messages: []provider.Message{provider.UserMessage(text)},
	}
}

func testText(t *testing.T, newProvider NewFunc) {
	r := Reply{Text: "Paris is the capital of France.", Usage: provider.Usage{InputTokens: 21, OutputTokens: 8}}
	p, s := setup(t, newProvider, r)
	req := question("What is the capital of France?")
	checkResponse(t, "Complete", complete(t, p, req), r)
	checkReceived(t, s, 0, req)
}

func testToolRoundTrip(t *testing.T, newProvider NewFunc) {
	call := Reply{
		ToolCalls: []provider.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}},
		Usage:     provider.Usage{InputTokens: 60, OutputTokens: 15},
	}
	answer := Reply{Text: "It is sunny in Paris.", Usage: provider.Usage{InputTokens: 90, OutputTokens: 7}}
	p, s := setup(t, newProvider, call, answer)

	req := question("What is the weather in Paris?")
	req.Tools = []provider.ToolDef{WeatherTool()}
	first := complete(t, p, req)
	checkResponse(t, "call", first, call)
	checkReceived(t, s, 0, req)
	if len(first.Message.ToolCalls) != 1 {
		t.FailNow()
	}

	req.Messages = append(req.Messages, first.Message,
		provider.ToolMessage(first.Message.ToolCalls[0].ID, "Sunny, 21°C.", false))
	checkResponse(t, "answer", complete(t, p, req), answer)
	checkReceived(t, s, 1, req)
}

func testParallelToolCalls(t *testing.T, newProvider NewFunc) {
	call := Reply{
		Text: "Checking both.",
		ToolCalls: []provider.ToolCall{
			{ID: "call_a", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
			{ID: "call_b", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Rome"}`)},
		},
		Usage: provider.Usage{InputTokens: 70, OutputTokens: 30},
	}
	answer := Reply{Text: "Paris is sunny; Rome is rainy.", Usage: provider.Usage{InputTokens: 120, OutputTokens: 9}}
	p, s := setup(t, newProvider, call, answer)

	req := question("What is the weather in Paris and Rome?")
	req.Tools = []provider.ToolDef{WeatherTool()}
	first := complete(t, p, req)
	checkResponse(t, "calls", first, call)
	if len(first.Message.ToolCalls) != 2 {
		t.FailNow()
	}
	req.Messages = append(req.Messages, first.Message,
		provider.ToolMessage(first.Message.ToolCalls[0].ID, "Sunny.", false),
		provider.ToolMessage(first.Message.ToolCalls[1].ID, "Rainy.", false))
	checkResponse(t, "answer", complete(t, p, req), answer)
	checkReceived(t, s, 1, req)
}

func testConversation(t *testing.T, newProvider NewFunc) {
	r := Reply{Text: "Rome is cloudy.", Usage: provider.Usage{InputTokens: 200, OutputTokens: 5}}
	p, s := setup(t, newProvider, r)
	req := Conversation()
	checkResponse(t, "Complete", complete(t, p, req), r)
	checkReceived(t, s, 0, req)
}

// errorCases are the statuses every provider must classify.
var errorCases = []struct {
	status int
	kind   provider.ErrorKind
}{
	{http.StatusBadRequest, provider.KindBadRequest},
	{http.StatusUnauthorized, provider.KindAuth},
	{http.StatusForbidden, provider.KindAuth},
	{http.StatusTooManyRequests, provider.KindRateLimit},
	{http.StatusInternalServerError, provider.KindTransient},
	{http.StatusServiceUnavailable, provider.KindTransient},
}

func checkKind(t *testing.T, err error, status int, kind provider.ErrorKind) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error; want a %v error", kind)
	}
	var perr *provider.Error
	if !errors.As(err, &perr) {
		t.Fatalf("error %v (%T) is not a *provider.Error", err, err)
	}
	if perr.Kind != kind || perr.StatusCode != status {
		t.Errorf("error %v has Kind %v and StatusCode %d; want %v and %d", err, perr.Kind, perr.StatusCode, kind, status)
	}
	if errors.Is(err, context.Canceled) {
		t.Errorf("error %v claims cancellation; nothing was cancelled", err)
	}
}

func testErrors(t *testing.T, newProvider NewFunc) {
	for _, tc := range errorCases {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			p, _ := setup(t, newProvider, Reply{Status: tc.status})
			_, err := p.Complete(t.Context(), question("Hello?"))
			checkKind(t, err, tc.status, tc.kind)
		})
		t.Run("Stream/"+http.StatusText(tc.status), func(t *testing.T) {
			p, _ := setup(t, newProvider, Reply{Status: tc.status})
			st := streamerOf(t, p)
			resp, err := st.Stream(t.Context(), question("Hello?"), func(provider.Delta) error { return nil })
			if err == nil {
				t.Fatalf("the stream answered %+v; want a %v error", resp, tc.kind)
			}
			checkKind(t, err, tc.status, tc.kind)
		})
	}
}

func checkCanceled(t *testing.T, err error, took time.Duration) {
	t.Helper()
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not wrap context.Canceled", err)
	}
	if took > promptly {
		t.Errorf("the call returned %v after cancellation; want it to return promptly", took)
	}
}

func testCancel(t *testing.T, newProvider NewFunc) {
	t.Run("Complete", func(t *testing.T) {
		p, s := setup(t, newProvider, Reply{Stall: true})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var cancelled time.Time
		done := make(chan struct{})
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			select {
			case <-s.stalled:
				cancelled = time.Now()
				cancel()
			case <-done:
			}
		}()
		_, err := p.Complete(ctx, question("Tell me a long story."))
		close(done)
		<-stopped
		if cancelled.IsZero() {
			if len(s.Received()) > 0 {
				t.Fatalf("Complete returned (error %v) while the model still held the call open; it must wait until its context ends", err)
			}
			t.Fatalf("Complete returned (error %v) before the model received the call", err)
		}
		checkCanceled(t, err, time.Since(cancelled))
	})

	t.Run("Stream", func(t *testing.T) {
		p, _ := setup(t, newProvider, Reply{Text: "Once upon a time", Stall: true})
		st := streamerOf(t, p)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var cancelled time.Time
		_, err := st.Stream(ctx, question("Tell me a long story."), func(provider.Delta) error {
			if cancelled.IsZero() {
				cancelled = time.Now()
				cancel()
			}
			return nil
		})
		if cancelled.IsZero() {
			t.Fatalf("the stream ended (%v) before the model's first text arrived", err)
		}
		checkCanceled(t, err, time.Since(cancelled))
	})

	t.Run("Before", func(t *testing.T) {
		s := NewScript(t, Reply{Stall: true})
		p := newProvider(t, s)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		start := time.Now()
		_, err := p.Complete(ctx, question("Hello?"))
		checkCanceled(t, err, time.Since(start))
	})
}

// streamerOf returns p as a provider.Streamer, or skips the test of a
// provider that does not stream.
func streamerOf(t *testing.T, p provider.Provider) provider.Streamer {
	t.Helper()
	st, ok := p.(provider.Streamer)
	if !ok {
		t.Skip("the provider does not implement provider.Streamer")
	}
	return st
}

// assembled is a reply put together from stream deltas.
type assembled struct {
	text  strings.Builder
	calls map[int]*provider.ToolCall
	args  map[int]*strings.Builder
}

func (a *assembled) add(t *testing.T, d provider.Delta) {
	t.Helper()
	a.text.WriteString(d.Text)
	if !d.HasToolCall() {
		return
	}
	tc := d.ToolCall
	if _, ok := a.calls[tc.Index]; !ok {
		if tc.ID == "" || tc.Name == "" {
			t.Errorf("the first fragment of tool call %d has ID %q and Name %q; want both", tc.Index, tc.ID, tc.Name)
		}
		a.calls[tc.Index] = &provider.ToolCall{ID: tc.ID, Name: tc.Name}
		a.args[tc.Index] = &strings.Builder{}
	}
	a.args[tc.Index].WriteString(tc.Arguments)
}

func (a *assembled) toolCalls() []provider.ToolCall {
	idx := make([]int, 0, len(a.calls))
	for i := range a.calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var out []provider.ToolCall
	for _, i := range idx {
		c := *a.calls[i]
		c.Arguments = json.RawMessage(a.args[i].String())
		out = append(out, c)
	}
	return out
}

func testStream(t *testing.T, newProvider NewFunc) {
	cases := []struct {
		name  string
		reply Reply
	}{
		{"Text", Reply{Text: "Paris is the capital of France, on the Seine.", Usage: provider.Usage{InputTokens: 21, OutputTokens: 12}}},
		{"ToolCalls", Reply{
			Text: "Checking both.",
			ToolCalls: []provider.ToolCall{
				{ID: "call_a", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
				{ID: "call_b", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Rome"}`)},
			},
			Usage: provider.Usage{InputTokens: 70, OutputTokens: 30},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, s := setup(t, newProvider, tc.reply, tc.reply)
			st := streamerOf(t, p)
			req := question("What is the weather in Paris and Rome?")
			req.Tools = []provider.ToolDef{WeatherTool()}
			want := complete(t, p, req)

			a := assembled{calls: map[int]*provider.ToolCall{}, args: map[int]*strings.Builder{}}
			var returned, inside atomic.Bool
			resp, err := st.Stream(t.Context(), req, func(d provider.Delta) error {
				if returned.Load() {
					t.Errorf("onDelta was called with %+v after Stream returned", d)
				}
				if inside.Swap(true) {
					t.Error("onDelta was called while a call of it was running: calls must come one at a time")
				}
				defer inside.Store(false)
				a.add(t, d)
				return nil
			})
			returned.Store(true)
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			final := &resp
			checkResponse(t, "Stream", *final, tc.reply)
			if diff := cmp.Diff(want, *final, cmpOpts); diff != "" {
				t.Errorf("the streamed Response differs from Complete's (-Complete +Stream):\n%s", diff)
			}
			if got := a.text.String(); got != final.Message.Content {
				t.Errorf("text deltas add up to %q; the Response has %q", got, final.Message.Content)
			}
			if diff := cmp.Diff(final.Message.ToolCalls, a.toolCalls(), cmpOpts); diff != "" {
				t.Errorf("tool-call deltas do not add up to the Response's calls (-Response +deltas):\n%s", diff)
			}
			checkReceived(t, s, 1, req)
		})
	}
	t.Run("Stop", func(t *testing.T) {
		r := Reply{Text: "Paris is the capital of France, on the Seine.", Usage: provider.Usage{InputTokens: 21, OutputTokens: 12}}
		p, _ := setup(t, newProvider, r)
		st := streamerOf(t, p)
		stop := errors.New("seen enough")
		calls := 0
		_, err := st.Stream(t.Context(), question("Hello?"), func(provider.Delta) error {
			calls++
			return stop
		})
		if !errors.Is(err, stop) {
			t.Errorf("Stream returned %v after onDelta failed with %q; want that error", err, stop)
		}
		if calls != 1 {
			t.Errorf("onDelta was called %d times after it failed on the first; want 1", calls)
		}
	})
	t.Run("NilCallback", func(t *testing.T) {
		r := Reply{Text: "Paris.", Usage: provider.Usage{InputTokens: 21, OutputTokens: 2}}
		p, _ := setup(t, newProvider, r)
		st := streamerOf(t, p)
		resp, err := st.Stream(t.Context(), question("Hello?"), nil)
		if err != nil {
			t.Fatalf("Stream with a nil onDelta: %v", err)
		}
		checkResponse(t, "Stream", resp, r)
	})
}
