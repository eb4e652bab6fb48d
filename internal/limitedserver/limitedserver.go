// Package limitedserver is a model server for tests that keeps to rate
// limits as OpenAI's and Anthropic's APIs do: requests and tokens a
// minute, refilled continuously, a 429 in the vendor's own wire format with
// Retry-After and the vendor's rate-limit headers when a request goes over,
// and the same headers on every answer. It answers every request with a
// short text, streamed or not, and counts what it served and refused.
//
// It reads the clock with time.Now, so under testing/synctest its minute
// is the bubble's; Client reaches it without a network, so that the whole
// exchange stays in the bubble.
package limitedserver

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Vendor is the wire format a Server speaks.
type Vendor string

// The wire formats.
const (
	OpenAI    Vendor = "openai"
	Anthropic Vendor = "anthropic"
)

// Answer is the text every reply carries, and OutputTokens what each
// reply reports it used for it.
const (
	Answer       = "done"
	OutputTokens = 20
)

// Server is a rate-limited model server. Set its exported fields before
// the first request.
type Server struct {
	// Latency is how long each answer takes.
	Latency time.Duration
	// MaxInFlight, when set, refuses a request that would make more than
	// that many at once as overloaded: Anthropic's 529, OpenAI's 503, with
	// no Retry-After.
	MaxInFlight int
	// Quiet leaves the rate-limit headers out, as many OpenAI-compatible
	// servers do: a 429 says only Retry-After.
	Quiet bool

	vendor   Vendor
	rpm, tpm float64
	inflight int
	overload int

	mu      sync.Mutex
	reqs    float64 // requests left of the minute's allowance
	toks    float64
	last    time.Time
	served  int
	refused int
	tokens  int64
}

// New returns a server in the vendor's format that allows rpm requests
// and tpm tokens a minute.
func New(vendor Vendor, rpm, tpm int) *Server {
	return &Server{vendor: vendor, rpm: float64(rpm), tpm: float64(tpm), reqs: float64(rpm), toks: float64(tpm)}
}

// Overloaded returns how many requests the server refused as overloaded
// (MaxInFlight).
func (s *Server) Overloaded() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.overload
}

// Counts returns how many requests the server answered, how many it
// refused with 429, and the tokens the answered ones used.
func (s *Server) Counts() (served, refused int, tokens int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served, s.refused, s.tokens
}

// Client returns an HTTP client that hands each request to the server in
// the calling goroutine, with no network between.
func (s *Server) Client() *http.Client {
	return &http.Client{Transport: roundTripper{s}}
}

type roundTripper struct{ h http.Handler }

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	rt.h.ServeHTTP(rec, req)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// ServeHTTP answers one chat request (OpenAI's /chat/completions or
// Anthropic's /v1/messages), or refuses it with 429.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "not JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	input := int64(len(body)/4 + 1)
	cost := float64(input + OutputTokens)

	s.mu.Lock()
	now := time.Now()
	if s.MaxInFlight > 0 && s.inflight >= s.MaxInFlight {
		s.overload++
		s.mu.Unlock()
		s.overloaded(w)
		return
	}
	if !s.last.IsZero() {
		dt := now.Sub(s.last).Seconds()
		s.reqs = math.Min(s.rpm, s.reqs+dt*s.rpm/60)
		s.toks = math.Min(s.tpm, s.toks+dt*s.tpm/60)
	}
	s.last = now
	if s.reqs < 1 || s.toks < cost {
		wait := math.Max((1-s.reqs)/(s.rpm/60), (cost-s.toks)/(s.tpm/60))
		s.refused++
		h := s.headers(w.Header(), now)
		s.mu.Unlock()
		s.refuse(w, h, time.Duration(wait*float64(time.Second)))
		return
	}
	s.reqs--
	s.toks -= cost
	s.served++
	s.tokens += int64(cost)
	s.headers(w.Header(), now)
	s.inflight++
	s.mu.Unlock()
	if s.Latency > 0 {
		time.Sleep(s.Latency)
	}
	s.mu.Lock()
	s.inflight--
	s.mu.Unlock()

	if req.Model == "" {
		req.Model = "model"
	}
	switch {
	case s.vendor == OpenAI && req.Stream:
		openAIStream(w, req.Model, input)
	case s.vendor == OpenAI:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			req.Model, Answer, input, OutputTokens, input+OutputTokens)
	case req.Stream:
		anthropicStream(w, req.Model, input)
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d}}`,
			req.Model, Answer, input, OutputTokens)
	}
}

// headers writes the vendor's rate-limit headers, as they stand after the
// request, and returns the header map. Called with s.mu held.
func (s *Server) headers(h http.Header, now time.Time) http.Header {
	if s.Quiet {
		return h
	}
	reqReset := time.Duration((s.rpm - s.reqs) / (s.rpm / 60) * float64(time.Second))
	tokReset := time.Duration((s.tpm - s.toks) / (s.tpm / 60) * float64(time.Second))
	reqLeft := strconv.FormatInt(int64(math.Max(s.reqs, 0)), 10)
	tokLeft := strconv.FormatInt(int64(math.Max(s.toks, 0)), 10)
	if s.vendor == OpenAI {
		h.Set("x-ratelimit-limit-requests", strconv.Itoa(int(s.rpm)))
		h.Set("x-ratelimit-remaining-requests", reqLeft)
		h.Set("x-ratelimit-reset-requests", reqReset.Round(time.Millisecond).String())
		h.Set("x-ratelimit-limit-tokens", strconv.Itoa(int(s.tpm)))
		h.Set("x-ratelimit-remaining-tokens", tokLeft)
		h.Set("x-ratelimit-reset-tokens", tokReset.Round(time.Millisecond).String())
		return h
	}
	h.Set("anthropic-ratelimit-requests-limit", strconv.Itoa(int(s.rpm)))
	h.Set("anthropic-ratelimit-requests-remaining", reqLeft)
	h.Set("anthropic-ratelimit-requests-reset", now.Add(reqReset).UTC().Format(time.RFC3339))
	h.Set("anthropic-ratelimit-tokens-limit", strconv.Itoa(int(s.tpm)))
	h.Set("anthropic-ratelimit-tokens-remaining", tokLeft)
	h.Set("anthropic-ratelimit-tokens-reset", now.Add(tokReset).UTC().Format(time.RFC3339))
	return h
}

// refuse answers 429 in the vendor's format: Retry-After in whole seconds
// (rounded up, as the header allows no fraction), and OpenAI's
// retry-after-ms and message hint.
func (s *Server) refuse(w http.ResponseWriter, h http.Header, wait time.Duration) {
	secs := int(math.Ceil(wait.Seconds()))
	h.Set("Retry-After", strconv.Itoa(max(secs, 1)))
	h.Set("Content-Type", "application/json")
	if s.vendor == OpenAI {
		h.Set("retry-after-ms", strconv.FormatInt(max(wait.Milliseconds(), 1), 10))
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"error":{"message":"Rate limit reached for requests. Please try again in %.3fs.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, wait.Seconds())
		return
	}
	w.WriteHeader(http.StatusTooManyRequests)
	io.WriteString(w, `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization. Please try again later."}}`)
}

// overloaded answers as a server over its capacity.
func (s *Server) overloaded(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	if s.vendor == OpenAI {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"message":"The server is overloaded. Please try again later.","type":"server_error","param":null,"code":null}}`)
		return
	}
	w.WriteHeader(529)
	io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
}

func openAIStream(w http.ResponseWriter, model string, input int64) {
	w.Header().Set("Content-Type", "text/event-stream")
	var b strings.Builder
	chunk := func(s string) { b.WriteString("data: " + s + "\n\n") }
	chunk(fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":{"role":"assistant","content":%q},"finish_reason":null}]}`, model, Answer))
	chunk(fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, model))
	chunk(fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, model, input, OutputTokens, input+OutputTokens))
	b.WriteString("data: [DONE]\n\n")
	io.WriteString(w, b.String())
}

func anthropicStream(w http.ResponseWriter, model string, input int64) {
	w.Header().Set("Content-Type", "text/event-stream")
	var b strings.Builder
	ev := func(name, data string) { b.WriteString("event: " + name + "\ndata: " + data + "\n\n") }
	ev("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":1}}}`, model, input))
	ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, Answer))
	ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
	ev("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, OutputTokens))
	ev("message_stop", `{"type":"message_stop"}`)
	io.WriteString(w, b.String())
}
