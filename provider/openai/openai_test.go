package openai_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	oai "github.com/openai/openai-go/v3"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
	"github.com/deputy-go/deputy/provider/openai"
	"github.com/deputy-go/deputy/provider/providertest"
)

// envKeys are the variables the SDK or this package read.
var envKeys = []string{
	"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_ADMIN_KEY", "OPENAI_ORG_ID",
	"OPENAI_PROJECT_ID", "OPENAI_WEBHOOK_SECRET", "OPENAI_CUSTOM_HEADERS",
}

// clearEnv unsets the variables that would make a test depend on the
// machine; they come back when the test ends.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, k := range envKeys {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
}

// canned is one answer of the test server, read from testdata/responses.
type canned struct {
	status int
	file   string
	header map[string]string
	abort  bool // drop the connection after the body, as a network failure would
}

// server answers requests with canned responses in order and records the
// bodies it received.
type server struct {
	t       *testing.T
	mu      sync.Mutex
	answers []canned
	bodies  [][]byte
	headers []http.Header
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.bodies)
	s.bodies = append(s.bodies, body)
	s.headers = append(s.headers, r.Header.Clone())
	s.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/chat/completions" {
		s.t.Errorf("request %d: %s %s; want POST /chat/completions", n, r.Method, r.URL.Path)
	}
	if n >= len(s.answers) {
		s.t.Errorf("request %d was not expected", n)
		http.Error(w, "unexpected", http.StatusTeapot)
		return
	}
	a := s.answers[n]
	data, err := os.ReadFile(filepath.Join("testdata", "responses", a.file))
	if err != nil {
		s.t.Error(err)
	}
	ct := "application/json"
	if strings.HasSuffix(a.file, ".sse") {
		ct = "text/event-stream"
	}
	w.Header().Set("Content-Type", ct)
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(a.status)
	w.Write(data)
	if a.abort {
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
}

func (s *server) requests() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies
}

func newTestProvider(t *testing.T, srv *httptest.Server, opts ...openai.Option) *openai.Provider {
	t.Helper()
	base := []openai.Option{
		openai.WithBaseURL(srv.URL),
		openai.WithAPIKey("sk-test"),
		openai.WithModel("gpt-5.4-mini"),
		openai.WithMaxRetries(0),
	}
	p, err := openai.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func weatherRequest() provider.Request {
	return provider.Request{
		System:   "You are a weather assistant.",
		Messages: []provider.Message{provider.UserMessage("What is the weather in Paris?")},
		Tools:    []provider.ToolDef{providertest.WeatherTool()},
	}
}

func ptr[T any](v T) *T { return &v }

// wantErr describes an expected failure.
type wantErr struct {
	kind   provider.ErrorKind
	status int
	sdk    bool // the SDK's *openai.Error is in the chain
}

func checkErr(t *testing.T, err error, want *wantErr) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	var perr *provider.Error
	if !errors.As(err, &perr) {
		t.Fatalf("error %v (%T) is not a *provider.Error", err, err)
	}
	if perr.Kind != want.kind || perr.StatusCode != want.status || perr.Provider != "openai" {
		t.Errorf("got %s error %q with status %d; want %q with status %d", perr.Provider, perr.Kind, perr.StatusCode, want.kind, want.status)
	}
	var aerr *oai.Error
	if got := errors.As(err, &aerr); got != want.sdk {
		t.Errorf("*openai.Error in the chain: %v; want %v (error: %v)", got, want.sdk, err)
	}
}

func TestComplete(t *testing.T) {
	structured := weatherRequest()
	structured.Tools = nil
	structured.ResponseSchema = json.RawMessage(`{"type":"object","properties":{"status":{"type":"string","enum":["success","partial","failed"]},"summary":{"type":"string"},"findings":{"type":["object","null"]}},"required":["status","summary"],"additionalProperties":false}`)
	structured.MaxTokens = 256
	structured.Temperature = ptr(0.2)

	// A closed schema with every property required fits strict mode.
	strict := structured
	strict.ResponseSchema = json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"},"unit":{"type":["string","null"]}},"required":["n","unit"],"additionalProperties":false}`)
	strict.CacheKey = "expert"
	hashed := structured
	hashed.CacheKey = "thread/" + strings.Repeat("ü", 40) // neither short nor ASCII
	structuredAnswer := provider.Response{
		Message:    provider.AssistantMessage(`{"status":"success","summary":"Paris is sunny.","findings":null}`),
		StopReason: provider.StopEndTurn,
		Usage:      provider.Usage{InputTokens: 120, OutputTokens: 19, Requests: 1},
		Model:      "gpt-5.4-mini-2026-03-17",
	}

	cases := []struct {
		name    string
		req     provider.Request
		opts    []openai.Option
		answers []canned
		want    provider.Response
		err     *wantErr
	}{
		{
			name:    "structured_strict_cache_key",
			req:     strict,
			answers: []canned{{status: 200, file: "structured.json"}},
			want:    structuredAnswer,
		},
		{
			name:    "cache_key_hashed",
			req:     hashed,
			answers: []canned{{status: 200, file: "structured.json"}},
			want:    structuredAnswer,
		},
		{
			name:    "without_format_and_cache_key",
			req:     strict,
			opts:    []openai.Option{openai.WithoutResponseFormat(), openai.WithoutPromptCacheKey()},
			answers: []canned{{status: 200, file: "structured.json"}},
			want:    structuredAnswer,
		},
		{
			name:    "text",
			req:     provider.Request{System: "Answer in one sentence.", Messages: []provider.Message{provider.UserMessage("What is the capital of France?")}},
			answers: []canned{{status: 200, file: "text.json"}},
			want: provider.Response{
				Message:    provider.AssistantMessage("Paris is the capital of France."),
				StopReason: provider.StopEndTurn,
				Usage:      provider.Usage{InputTokens: 24, OutputTokens: 8, Requests: 1},
				Model:      "gpt-5.4-mini-2026-03-17",
			},
		},
		{
			name:    "tool_call",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "tool_call.json"}},
			want: provider.Response{
				Message:    provider.AssistantMessage("", provider.ToolCall{ID: "call_12345xyz", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}),
				StopReason: provider.StopToolUse,
				Usage:      provider.Usage{InputTokens: 82, OutputTokens: 17, CacheReadTokens: 64, Requests: 1},
				Model:      "gpt-5.4-mini-2026-03-17",
			},
		},
		{
			name:    "parallel_tool_calls",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "parallel_tool_calls.json"}},
			want: provider.Response{
				Message: provider.AssistantMessage("",
					provider.ToolCall{ID: "call_paris", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
					provider.ToolCall{ID: "call_rome", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Rome"}`)}),
				StopReason: provider.StopToolUse,
				Usage:      provider.Usage{InputTokens: 90, OutputTokens: 46, Requests: 1},
				Model:      "gpt-5.4-mini-2026-03-17",
			},
		},
		{
			name:    "structured",
			req:     structured,
			answers: []canned{{status: 200, file: "structured.json"}},
			want: provider.Response{
				Message:    provider.AssistantMessage(`{"status":"success","summary":"Paris is sunny.","findings":null}`),
				StopReason: provider.StopEndTurn,
				Usage:      provider.Usage{InputTokens: 120, OutputTokens: 19, Requests: 1},
				Model:      "gpt-5.4-mini-2026-03-17",
			},
		},
		{
			name:    "legacy_max_tokens",
			req:     provider.Request{Model: "llama3.2", MaxTokens: 10, Messages: []provider.Message{provider.UserMessage("Tell me a story.")}},
			opts:    []openai.Option{openai.WithLegacyMaxTokens()},
			answers: []canned{{status: 200, file: "length.json"}},
			want: provider.Response{
				Message:    provider.AssistantMessage("Once upon a time, in a land far"),
				StopReason: provider.StopMaxTokens,
				Usage:      provider.Usage{InputTokens: 14, OutputTokens: 10, Requests: 1},
				Model:      "gpt-5.4-mini-2026-03-17",
			},
		},
		{
			name:    "refusal",
			req:     provider.Request{Messages: []provider.Message{provider.UserMessage("Help me with something bad.")}},
			answers: []canned{{status: 200, file: "refusal.json"}},
			want: provider.Response{
				Message:    provider.AssistantMessage("I'm sorry, I can't help with that."),
				StopReason: provider.StopRefusal,
				Usage:      provider.Usage{InputTokens: 30, OutputTokens: 10, Requests: 1},
				Model:      "gpt-5.4-mini-2026-03-17",
			},
		},
		{
			name:    "bad_request",
			req:     weatherRequest(),
			answers: []canned{{status: 400, file: "error_400.json"}},
			err:     &wantErr{kind: provider.KindBadRequest, status: 400, sdk: true},
		},
		{
			name:    "context_window",
			req:     weatherRequest(),
			answers: []canned{{status: 400, file: "error_context_length.json"}},
			err:     &wantErr{kind: provider.KindContextWindow, status: 400, sdk: true},
		},
		{
			name:    "unauthorized",
			req:     weatherRequest(),
			answers: []canned{{status: 401, file: "error_401.json"}},
			err:     &wantErr{kind: provider.KindAuth, status: 401, sdk: true},
		},
		{
			name: "rate_limit_then_success",
			req:  weatherRequest(),
			opts: []openai.Option{openai.WithMaxRetries(2)},
			answers: []canned{
				{status: 429, file: "error_429.json", header: map[string]string{"Retry-After-Ms": "100"}},
				{status: 200, file: "tool_call.json"},
			},
			want: provider.Response{
				Message:    provider.AssistantMessage("", provider.ToolCall{ID: "call_12345xyz", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}),
				StopReason: provider.StopToolUse,
				Usage:      provider.Usage{InputTokens: 82, OutputTokens: 17, CacheReadTokens: 64, Requests: 1},
				Model:      "gpt-5.4-mini-2026-03-17",
			},
		},
		{
			name:    "rate_limit",
			req:     weatherRequest(),
			answers: []canned{{status: 429, file: "error_429.json"}},
			err:     &wantErr{kind: provider.KindRateLimit, status: 429, sdk: true},
		},
		{
			name: "server_error_after_retry",
			req:  weatherRequest(),
			opts: []openai.Option{openai.WithMaxRetries(1)},
			answers: []canned{
				{status: 500, file: "error_500.json", header: map[string]string{"Retry-After-Ms": "1"}},
				{status: 500, file: "error_500.json", header: map[string]string{"Retry-After-Ms": "1"}},
			},
			err: &wantErr{kind: provider.KindTransient, status: 500, sdk: true},
		},
		{
			name:    "malformed",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "malformed.json"}},
			err:     &wantErr{kind: provider.KindMalformed, status: 200},
		},
		{
			name:    "not_a_completion",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "error_400.json"}},
			err:     &wantErr{kind: provider.KindMalformed, status: 200},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			s := &server{t: t, answers: tc.answers}
			srv := httptest.NewServer(s)
			defer srv.Close()
			p := newTestProvider(t, srv, tc.opts...)

			got, err := p.Complete(t.Context(), tc.req)
			checkErr(t, err, tc.err)
			if tc.err == nil {
				// A call retried after a 429 waited for admission; how long
				// depends on the clock. The 429 asks for 100 ms, so that
				// the wait is not over before the retry asks to go on a
				// loaded machine.
				if retried := len(tc.answers) > 1; retried != (got.Queued > 0) {
					t.Errorf("Queued %v; want it set exactly when the call was retried", got.Queued)
				}
				got.Queued = 0
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("response mismatch (-want +got):\n%s", diff)
				}
			}
			bodies := s.requests()
			if len(bodies) != len(tc.answers) {
				t.Fatalf("the server received %d requests; want %d", len(bodies), len(tc.answers))
			}
			for i := 1; i < len(bodies); i++ {
				if !bytes.Equal(bodies[i], bodies[0]) {
					t.Errorf("retry %d sent a different body:\n%s\nfirst:\n%s", i, bodies[i], bodies[0])
				}
			}
			wiretest.Golden(t, tc.name, bodies[0])
			if auth := s.headers[0].Get("Authorization"); auth != "Bearer sk-test" {
				t.Errorf("Authorization = %q; want the API key as a bearer token", auth)
			}
		})
	}
}

func TestStream(t *testing.T) {
	text := func(s string) provider.Delta { return provider.Delta{Text: s} }
	call := func(i int, id, name, args string) provider.Delta {
		return provider.Delta{ToolCall: provider.ToolCallDelta{Index: i, ID: id, Name: name, Arguments: args}}
	}

	cases := []struct {
		name    string
		req     provider.Request
		answers []canned
		want    []provider.Delta
		resp    provider.Response // when the stream succeeds
		err     *wantErr
	}{
		{
			name:    "stream_text",
			req:     provider.Request{System: "Answer in one sentence.", Messages: []provider.Message{provider.UserMessage("What is the capital of France?")}},
			answers: []canned{{status: 200, file: "stream_text.sse"}},
			want: []provider.Delta{
				text("Paris is"), text(" the capital"), text(" of France."),
			},
			resp: provider.Response{
				Message:    provider.AssistantMessage("Paris is the capital of France."),
				StopReason: provider.StopEndTurn,
				Usage:      provider.Usage{InputTokens: 24, OutputTokens: 8, Requests: 1},
				Model:      "gpt-5.4-mini-2026-03-17",
			},
		},
		{
			name:    "stream_tool_call",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "stream_tool_call.sse"}},
			want: []provider.Delta{
				call(0, "call_paris", "get_weather", ""), call(0, "", "", `{"ci`), call(0, "", "", `ty": "Paris"}`),
				call(1, "call_rome", "get_weather", ""), call(1, "", "", `{"city":`), call(1, "", "", ` "Rome"}`),
			},
			resp: provider.Response{
				Message: provider.AssistantMessage("",
					provider.ToolCall{ID: "call_paris", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
					provider.ToolCall{ID: "call_rome", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Rome"}`)}),
				StopReason: provider.StopToolUse,
				Usage:      provider.Usage{InputTokens: 90, OutputTokens: 46, Requests: 1},
				Model:      "gpt-5.4-mini-2026-03-17",
			},
		},
		{
			name:    "stream_cut",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "stream_cut.sse", abort: true}},
			want:    []provider.Delta{text("Paris is")},
			err:     &wantErr{kind: provider.KindTransient, status: 200},
		},
		{
			name:    "stream_truncated",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "stream_cut.sse"}},
			want:    []provider.Delta{text("Paris is")},
			err:     &wantErr{kind: provider.KindTransient, status: 200},
		},
		{
			name:    "stream_error_event",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "stream_error.sse"}},
			want:    []provider.Delta{text("Par")},
			err:     &wantErr{kind: provider.KindTransient, status: 200},
		},
		{
			name:    "stream_unauthorized",
			req:     weatherRequest(),
			answers: []canned{{status: 401, file: "error_401.json"}},
			err:     &wantErr{kind: provider.KindAuth, status: 401, sdk: true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			s := &server{t: t, answers: tc.answers}
			srv := httptest.NewServer(s)
			defer srv.Close()
			p := newTestProvider(t, srv)

			var got []provider.Delta
			resp, err := p.Stream(t.Context(), tc.req, func(d provider.Delta) error {
				got = append(got, d)
				return nil
			})
			checkErr(t, err, tc.err)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("deltas mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.resp, resp); diff != "" {
				t.Errorf("response mismatch (-want +got):\n%s", diff)
			}
			wiretest.Golden(t, tc.name, s.requests()[0])
		})
	}
}

// TestStreamStopsEarly checks that a callback that fails ends the stream
// without further deltas, and that Stream returns the callback's error.
func TestStreamStopsEarly(t *testing.T) {
	clearEnv(t)
	srv := httptest.NewServer(&server{t: t, answers: []canned{{status: 200, file: "stream_text.sse"}}})
	defer srv.Close()
	wiretest.StreamStopsEarly(t, newTestProvider(t, srv), weatherRequest())
}

// TestBadRequests checks that a request the API could never accept fails
// before anything is sent, saying what to change.
func TestBadRequests(t *testing.T) {
	user := provider.UserMessage("Hi")
	cases := []struct {
		name string
		req  provider.Request
		want string
	}{
		{"no messages", provider.Request{System: "x"}, "add at least one user message"},
		{"system message", provider.Request{Messages: []provider.Message{{Role: provider.RoleSystem, Content: "x"}, user}}, "put the system prompt in Request.System"},
		{"unknown role", provider.Request{Messages: []provider.Message{{Role: "critic", Content: "x"}}}, `unknown role "critic"`},
		{"tool result without id", provider.Request{Messages: []provider.Message{user, provider.ToolMessage("", "x", false)}}, "set it to the ID of the call"},
		{"tool call without id", provider.Request{Messages: []provider.Message{user, provider.AssistantMessage("", provider.ToolCall{Name: "f"})}}, "has no ID"},
		{"tool without name", provider.Request{Messages: []provider.Message{user}, Tools: []provider.ToolDef{{Parameters: json.RawMessage(`{}`)}}}, "give every tool a name"},
		{"tool schema not object", provider.Request{Messages: []provider.Message{user}, Tools: []provider.ToolDef{{Name: "f", Parameters: json.RawMessage(`[1]`)}}}, "not a JSON object"},
		{"negative max tokens", provider.Request{Messages: []provider.Message{user}, MaxTokens: -1}, "use a positive cap"},
		{"response schema not object", provider.Request{Messages: []provider.Message{user}, ResponseSchema: json.RawMessage(`"x"`)}, "ResponseSchema is not a JSON object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			s := &server{t: t}
			srv := httptest.NewServer(s)
			defer srv.Close()
			p := newTestProvider(t, srv)
			_, err := p.Complete(t.Context(), tc.req)
			checkErr(t, err, &wantErr{kind: provider.KindBadRequest})
			if err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			_, err = p.Stream(t.Context(), tc.req, nil)
			checkErr(t, err, &wantErr{kind: provider.KindBadRequest})
			if n := len(s.requests()); n != 0 {
				t.Errorf("the server received %d requests; want none", n)
			}
		})
	}
}

// TestConnectionRefused checks that a server that cannot be reached is a
// transient failure with no status.
func TestConnectionRefused(t *testing.T) {
	clearEnv(t)
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	p := newTestProvider(t, srv)
	_, err := p.Complete(t.Context(), weatherRequest())
	checkErr(t, err, &wantErr{kind: provider.KindTransient})
}

// TestReplay sends the suite's shared conversation (a user question, two
// parallel tool calls, their results, an answer and a follow-up) and keeps
// the request body as a golden file beside the Anthropic provider's.
func TestReplay(t *testing.T) {
	clearEnv(t)
	s := &server{t: t, answers: []canned{{status: 200, file: "text.json"}}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	p := newTestProvider(t, srv)
	req := providertest.Conversation()
	if _, err := p.Complete(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	body := s.requests()[0]
	wiretest.Golden(t, "replay", body)

	// The body decodes back into the same conversation, except for the error
	// flag that Chat Completions cannot carry.
	_, got, err := decodeRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	want := req
	for i := range want.Messages {
		want.Messages[i].IsError = false
	}
	opts := cmp.Options{
		cmp.Transformer("JSON", func(m json.RawMessage) any {
			var v any
			_ = json.Unmarshal(m, &v)
			return v
		}),
	}
	if diff := cmp.Diff(want.Messages, got.Messages, opts); diff != "" {
		t.Errorf("the conversation did not survive the wire (-sent +decoded):\n%s", diff)
	}
}

func TestCancelBeforeSending(t *testing.T) {
	clearEnv(t)
	srv := httptest.NewServer(&server{t: t})
	defer srv.Close()
	wiretest.CancelBeforeSending(t, newTestProvider(t, srv), weatherRequest())
}
