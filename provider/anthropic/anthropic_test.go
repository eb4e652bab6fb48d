package anthropic_test

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

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
	"github.com/deputy-go/deputy/provider/providertest"
)

// envKeys are the variables the SDK or this package read.
var envKeys = []string{
	"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL",
	"ANTHROPIC_PROFILE", "ANTHROPIC_CONFIG_DIR", "ANTHROPIC_CUSTOM_HEADERS", "ANTHROPIC_WEBHOOK_SIGNING_KEY",
	"ANTHROPIC_ORGANIZATION_ID", "ANTHROPIC_FEDERATION_RULE_ID", "ANTHROPIC_IDENTITY_TOKEN_FILE",
	"ANTHROPIC_OPEN_TELEMETRY", "ANTHROPIC_OPEN_TELEMETRY_PROPAGATION",
}

// clearEnv unsets the variables that would make a test depend on the
// machine, and points the SDK's profile lookup at an empty directory.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, k := range envKeys {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir)
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
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		s.t.Errorf("request %d: %s %s; want POST /v1/messages", n, r.Method, r.URL.Path)
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
	w.Header().Set("request-id", "req_test")
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

func newTestProvider(t *testing.T, srv *httptest.Server, opts ...anthropic.Option) *anthropic.Provider {
	t.Helper()
	base := []anthropic.Option{
		anthropic.WithBaseURL(srv.URL),
		anthropic.WithAPIKey("sk-ant-test"),
		anthropic.WithModel("claude-sonnet-5-5"),
		anthropic.WithMaxRetries(0),
	}
	p, err := anthropic.New(append(base, opts...)...)
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
	sdk    bool // the SDK's *anthropic.Error is in the chain
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
	if perr.Kind != want.kind || perr.StatusCode != want.status || perr.Provider != "anthropic" {
		t.Errorf("got %s error %q with status %d; want %q with status %d (%v)", perr.Provider, perr.Kind, perr.StatusCode, want.kind, want.status, err)
	}
	var aerr *ant.Error
	if got := errors.As(err, &aerr); got != want.sdk {
		t.Errorf("*anthropic.Error in the chain: %v; want %v (error: %v)", got, want.sdk, err)
	}
}

func TestComplete(t *testing.T) {
	structured := weatherRequest()
	structured.Tools = nil
	structured.ResponseSchema = json.RawMessage(`{"type":"object","properties":{"status":{"type":"string","enum":["success","partial","failed"]},"summary":{"type":"string"},"findings":{"type":["object","null"]}},"required":["status","summary"],"additionalProperties":false}`)
	structured.MaxTokens = 256
	structured.Temperature = ptr(0.2) // not sent: the API has no such parameter
	// A schema the API takes once narrowed: the object closed, the bounds
	// left out, the type list made anyOf.
	narrowed := structured
	narrowed.ResponseSchema = json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","maxLength":40},"temp":{"type":["number","null"],"minimum":-90,"description":"Celsius"}},"required":["city","temp"]}`)
	bare := structured
	bare.Tools = weatherRequest().Tools
	structuredAnswer := provider.Response{
		Message:    provider.AssistantMessage(`{"status":"success","summary":"Paris is sunny.","findings":null}`),
		StopReason: provider.StopEndTurn,
		Usage:      provider.Usage{InputTokens: 150, OutputTokens: 21, Requests: 1},
		Model:      "claude-sonnet-5-5",
	}

	toolCall := provider.Response{
		Message: provider.AssistantMessage("I'll check the weather in Paris.",
			provider.ToolCall{ID: "toolu_01A09q90qw90lq917835lq9", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}),
		StopReason: provider.StopToolUse,
		Usage:      provider.Usage{InputTokens: 2110, OutputTokens: 44, CacheReadTokens: 2000, CacheWriteTokens: 100, Requests: 1},
		Model:      "claude-sonnet-5-5",
	}

	cases := []struct {
		name    string
		req     provider.Request
		opts    []anthropic.Option
		answers []canned
		want    provider.Response
		err     *wantErr
	}{
		{
			name:    "text",
			req:     provider.Request{System: "Answer in one sentence.", Messages: []provider.Message{provider.UserMessage("What is the capital of France?")}},
			answers: []canned{{status: 200, file: "text.json"}},
			want: provider.Response{
				Message:    provider.AssistantMessage("Paris is the capital of France."),
				StopReason: provider.StopEndTurn,
				Usage:      provider.Usage{InputTokens: 21, OutputTokens: 8, Requests: 1},
				Model:      "claude-sonnet-5-5",
			},
		},
		{
			name:    "tool_call",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "tool_call.json"}},
			want:    toolCall,
		},
		{
			name:    "parallel_tool_calls",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "parallel_tool_calls.json"}},
			want: provider.Response{
				Message: provider.AssistantMessage("",
					provider.ToolCall{ID: "toolu_paris", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
					provider.ToolCall{ID: "toolu_rome", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Rome"}`)}),
				StopReason: provider.StopToolUse,
				Usage:      provider.Usage{InputTokens: 410, OutputTokens: 92, Requests: 1},
				Model:      "claude-sonnet-5-5",
			},
		},
		{
			// ReportSchema's findings is a free-form object, which the API
			// does not take: no output format, the prompt describes it.
			name:    "structured_free_form",
			req:     structured,
			answers: []canned{{status: 200, file: "structured.json"}},
			want:    structuredAnswer,
		},
		{
			// Without caching, the request has no breakpoint; without the
			// output format, no output_config.
			name:    "without_caching_or_format",
			req:     bare,
			opts:    []anthropic.Option{anthropic.WithoutPromptCaching(), anthropic.WithoutOutputFormat()},
			answers: []canned{{status: 200, file: "structured.json"}},
			want:    structuredAnswer,
		},
		{
			name:    "structured",
			req:     narrowed,
			answers: []canned{{status: 200, file: "structured.json"}},
			want: provider.Response{
				Message:    provider.AssistantMessage(`{"status":"success","summary":"Paris is sunny.","findings":null}`),
				StopReason: provider.StopEndTurn,
				Usage:      provider.Usage{InputTokens: 150, OutputTokens: 21, Requests: 1},
				Model:      "claude-sonnet-5-5",
			},
		},
		{
			name:    "max_tokens",
			req:     provider.Request{Model: "claude-haiku-5-5", Messages: []provider.Message{provider.UserMessage("Tell me a story.")}},
			opts:    []anthropic.Option{anthropic.WithMaxTokens(10)},
			answers: []canned{{status: 200, file: "max_tokens.json"}},
			want: provider.Response{
				Message:    provider.AssistantMessage("Once upon a time, in a land far"),
				StopReason: provider.StopMaxTokens,
				Usage:      provider.Usage{InputTokens: 14, OutputTokens: 10, Requests: 1},
				Model:      "claude-sonnet-5-5",
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
			answers: []canned{{status: 400, file: "error_prompt_too_long.json"}},
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
			opts: []anthropic.Option{anthropic.WithMaxRetries(2)},
			answers: []canned{
				{status: 429, file: "error_429.json", header: map[string]string{"Retry-After-Ms": "100"}},
				{status: 200, file: "tool_call.json"},
			},
			want: toolCall,
		},
		{
			name:    "rate_limit",
			req:     weatherRequest(),
			answers: []canned{{status: 429, file: "error_429.json"}},
			err:     &wantErr{kind: provider.KindRateLimit, status: 429, sdk: true},
		},
		{
			name: "overloaded_after_retry",
			req:  weatherRequest(),
			opts: []anthropic.Option{anthropic.WithMaxRetries(1)},
			answers: []canned{
				{status: 529, file: "error_529.json", header: map[string]string{"Retry-After-Ms": "1"}},
				{status: 529, file: "error_529.json", header: map[string]string{"Retry-After-Ms": "1"}},
			},
			err: &wantErr{kind: provider.KindTransient, status: 529, sdk: true},
		},
		{
			name:    "server_error",
			req:     weatherRequest(),
			answers: []canned{{status: 500, file: "error_500.json"}},
			err:     &wantErr{kind: provider.KindTransient, status: 500, sdk: true},
		},
		{
			name:    "malformed",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "malformed.json"}},
			err:     &wantErr{kind: provider.KindMalformed, status: 200},
		},
		{
			name:    "not_a_message",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "error_400.json"}},
			err:     &wantErr{kind: provider.KindMalformed, status: 200},
		},
		{
			// The SDK will not wait for a reply this long without a stream,
			// so Complete streams it.
			name:    "long_reply_streams",
			req:     provider.Request{Messages: []provider.Message{provider.UserMessage("What is the capital of France?")}, MaxTokens: 64000},
			answers: []canned{{status: 200, file: "stream_text.sse"}},
			want: provider.Response{
				Message:    provider.AssistantMessage("Paris is the capital of France."),
				StopReason: provider.StopEndTurn,
				Usage:      provider.Usage{InputTokens: 21, OutputTokens: 8, Requests: 1},
				Model:      "claude-sonnet-5-5",
			},
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
			if _, _, err := decodeRequest(bodies[0]); err != nil {
				t.Errorf("the API would reject the request: %v", err)
			}
			h := s.headers[0]
			if h.Get("Authorization") != "Bearer sk-ant-test" && h.Get("X-Api-Key") != "sk-ant-test" {
				t.Errorf("the request does not carry the API key: %v", h)
			}
			if h.Get("Anthropic-Version") == "" {
				t.Error("the request has no anthropic-version header")
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
				Usage:      provider.Usage{InputTokens: 21, OutputTokens: 8, Requests: 1},
				Model:      "claude-sonnet-5-5",
			},
		},
		{
			name:    "stream_tool_call",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "stream_tool_call.sse"}},
			want: []provider.Delta{
				text("Checking both."),
				call(0, "toolu_paris", "get_weather", ""), call(0, "", "", `{"city": "Pa`), call(0, "", "", `ris"}`),
				call(1, "toolu_rome", "get_weather", ""), call(1, "", "", `{"city":`), call(1, "", "", ` "Rome"}`),
			},
			resp: provider.Response{
				Message: provider.AssistantMessage("Checking both.",
					provider.ToolCall{ID: "toolu_paris", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
					provider.ToolCall{ID: "toolu_rome", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Rome"}`)}),
				StopReason: provider.StopToolUse,
				Usage:      provider.Usage{InputTokens: 2110, OutputTokens: 92, CacheReadTokens: 2000, CacheWriteTokens: 100, Requests: 1},
				Model:      "claude-sonnet-5-5",
			},
		},
		{
			name:    "stream_cut",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "stream_cut.sse", abort: true}},
			want:    []provider.Delta{text("Paris is"), text(" the capital"), text(" of France.")},
			err:     &wantErr{kind: provider.KindTransient, status: 200},
		},
		{
			name:    "stream_truncated",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "stream_cut.sse"}},
			want:    []provider.Delta{text("Paris is"), text(" the capital"), text(" of France.")},
			err:     &wantErr{kind: provider.KindTransient, status: 200},
		},
		{
			name:    "stream_error_event",
			req:     weatherRequest(),
			answers: []canned{{status: 200, file: "stream_error.sse"}},
			want:    []provider.Delta{text("Par")},
			err:     &wantErr{kind: provider.KindTransient, status: 200, sdk: true},
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

// TestRequestMapping covers what the Messages API needs that the vocabulary
// does not say: tool results merged into one user turn, ahead of the user's
// text; IDs and arguments from another provider made acceptable; empty text
// left out.
func TestRequestMapping(t *testing.T) {
	user := provider.UserMessage("What is the weather in Paris and Rome?")
	calls := provider.AssistantMessage("",
		provider.ToolCall{ID: "call.paris", Name: "get_weather", Arguments: json.RawMessage(`{"city": "Par`)},
		provider.ToolCall{ID: "call_rome", Name: "get_weather"})
	cases := []struct {
		name string
		req  provider.Request
	}{
		{"results_then_user", provider.Request{Messages: []provider.Message{
			user, calls,
			provider.ToolMessage("call.paris", "invalid arguments: unexpected end of JSON input", true),
			provider.ToolMessage("call_rome", "", false),
			provider.UserMessage("Use Celsius."),
		}}},
		{"empty_text_left_out", provider.Request{Messages: []provider.Message{
			provider.UserMessage(""), user, provider.AssistantMessage(""), provider.UserMessage("Hello?"),
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			s := &server{t: t, answers: []canned{{status: 200, file: "text.json"}}}
			srv := httptest.NewServer(s)
			defer srv.Close()
			p := newTestProvider(t, srv)
			if _, err := p.Complete(t.Context(), tc.req); err != nil {
				t.Fatal(err)
			}
			body := s.requests()[0]
			wiretest.Golden(t, tc.name, body)
			if _, _, err := decodeRequest(body); err != nil {
				t.Errorf("the API would reject the request: %v\n%s", err, body)
			}
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
		{"only empty messages", provider.Request{Messages: []provider.Message{provider.UserMessage("")}}, "add at least one user message"},
		{"system message", provider.Request{Messages: []provider.Message{{Role: provider.RoleSystem, Content: "x"}, user}}, "put the system prompt in Request.System"},
		{"unknown role", provider.Request{Messages: []provider.Message{{Role: "critic", Content: "x"}}}, `unknown role "critic"`},
		{"tool result without id", provider.Request{Messages: []provider.Message{user, provider.ToolMessage("", "x", false)}}, "set it to the ID of the call"},
		{"tool call without id", provider.Request{Messages: []provider.Message{user, provider.AssistantMessage("", provider.ToolCall{Name: "f"})}}, "has no ID"},
		{"tool without name", provider.Request{Messages: []provider.Message{user}, Tools: []provider.ToolDef{{Parameters: json.RawMessage(`{}`)}}}, "give every tool a name"},
		{"tool schema not object", provider.Request{Messages: []provider.Message{user}, Tools: []provider.ToolDef{{Name: "f", Parameters: json.RawMessage(`[1]`)}}}, "not a JSON object"},
		{"tool schema of a string", provider.Request{Messages: []provider.Message{user}, Tools: []provider.ToolDef{{Name: "f", Parameters: json.RawMessage(`{"type":"string"}`)}}}, "takes an object schema"},
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

// TestNoCredentials checks that a missing key is an auth failure that says
// what to set, found before anything is sent.
func TestNoCredentials(t *testing.T) {
	clearEnv(t)
	s := &server{t: t}
	srv := httptest.NewServer(s)
	defer srv.Close()
	p, err := anthropic.New(anthropic.WithBaseURL(srv.URL), anthropic.WithMaxRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Complete(t.Context(), weatherRequest())
	checkErr(t, err, &wantErr{kind: provider.KindAuth})
	if err != nil && !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Errorf("error %q does not say to set ANTHROPIC_API_KEY", err)
	}
	if n := len(s.requests()); n != 0 {
		t.Errorf("the server received %d requests; want none", n)
	}
}

// TestReplay sends the suite's shared conversation (a user question, two
// parallel tool calls, their results, an answer and a follow-up) and keeps
// the request body as a golden file beside the OpenAI provider's.
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

	// The API would accept the body, and it decodes back into the same
	// conversation, error flag included.
	_, got, err := decodeRequest(body)
	if err != nil {
		t.Fatalf("the API would reject the request: %v", err)
	}
	opts := cmp.Transformer("JSON", func(m json.RawMessage) any {
		var v any
		_ = json.Unmarshal(m, &v)
		return v
	})
	if diff := cmp.Diff(req.Messages, got.Messages, opts); diff != "" {
		t.Errorf("the conversation did not survive the wire (-sent +decoded):\n%s", diff)
	}
	if got.System != req.System {
		t.Errorf("system = %q; want %q", got.System, req.System)
	}
}

func TestCancelBeforeSending(t *testing.T) {
	clearEnv(t)
	srv := httptest.NewServer(&server{t: t})
	defer srv.Close()
	wiretest.CancelBeforeSending(t, newTestProvider(t, srv), weatherRequest())
}
