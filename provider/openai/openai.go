// Package openai is a deputy provider for OpenAI's Chat Completions API and
// for the many servers that speak it: Ollama, vLLM, llama.cpp, LM Studio,
// OpenRouter and others.
//
// It is a thin adapter over the official SDK, github.com/openai/openai-go/v3:
// authentication and the wire format stay the SDK's job. The adapter maps
// deputy's provider vocabulary onto Chat Completions and back, streams
// replies, classifies failures as *provider.Error, and sends each call
// through admission control (see Rate limits).
//
// # Configuration
//
// New reads the environment the way OpenAI's own tools do: OPENAI_API_KEY and
// OPENAI_BASE_URL (read by the SDK), and OPENAI_MODEL for the default model
// (else DefaultModel). Options override the environment. A local server that
// needs no key works without one:
//
//	p, err := openai.New(
//		openai.WithBaseURL("http://localhost:11434/v1"), // Ollama
//		openai.WithModel("qwen3"),
//	)
//
// # Mapping
//
//   - Request.System becomes a system message before the conversation.
//   - Tool results travel as tool messages. Chat Completions has no error flag
//     for them, so Message.IsError is not sent: the result's text is what tells
//     the model that the tool failed.
//   - Request.MaxTokens is sent as max_completion_tokens (WithLegacyMaxTokens
//     sends max_tokens, for servers that only know the older field).
//   - Request.ResponseSchema asks for structured output with response_format
//     json_schema, under the name "response". Strict mode is on when the
//     schema fits the subset OpenAI's strict mode takes (every object closed
//     with additionalProperties false and every property required, a small
//     set of keywords); other schemas are sent without it, so that schemas
//     with optional properties stay valid. WithoutResponseFormat leaves
//     response_format out.
//   - Request.CacheKey becomes prompt_cache_key, which routes requests that
//     share a prefix to the same cache. A key longer than 64 bytes, or not
//     plain printable ASCII, is sent as its SHA-256 in hex.
//     WithoutPromptCacheKey leaves it out. Nothing that changes from call to
//     call is put ahead of the conversation: the system message comes
//     first, then the messages in order, then the tools, so that OpenAI's
//     automatic prompt caching can reuse a repeated prefix.
//   - Streaming asks for usage (stream_options.include_usage), so the
//     Response Stream returns reports tokens as Complete's does.
//
// # Errors
//
// Every failure is a *provider.Error whose Err holds the SDK's error (an
// *openai.Error for API errors). A 400 whose code is context_length_exceeded,
// or whose message says the context length was exceeded, has
// KindContextWindow. The caller's own cancellation is reported as an error
// wrapping ctx.Err() instead, so that errors.Is(err, context.Canceled) holds.
//
// # Rate limits
//
// Each call waits for admission (provider.Admission) until the model's
// limits let it go, instead of failing with a rate limit: requests and
// tokens a minute as the server's x-ratelimit-* headers and Retry-After
// say, and an adaptive bound on calls in flight. A 429 is tried again after
// the wait the server asked for (its Retry-After, or the wait its message
// names), up to provider.DefaultAdmissionRetries times. The SDK's own
// retry loop is off, so that only one loop retries. Every Response and
// rate-limited *provider.Error carries what the server said
// (provider.RateLimit). A provider makes an Admission of its own; give one
// to every provider of a process that calls the same account
// (WithAdmission), so that they keep to its limits together.
// WithoutAdmission goes back to the SDK's retries (WithMaxRetries).
//
// Other failures a retry may mend (a 5xx, an overload, a dropped
// connection) are tried again with a jittered backoff for at most
// WithRetryTime from the first (default provider.DefaultRetryTime, 30
// seconds). A server that cannot be reached at all, a connection refused
// or a host name that does not resolve, gets 2 seconds of it: the first
// call to a wrong URL fails within seconds, with an error that names the
// URL and says to set it with WithBaseURL or OPENAI_BASE_URL. Each retry is logged
// at Warn to WithLogger's logger, and goes to the call context's event
// sink as a provider.AdmissionEvent of state "retry".
//
// # Limits
//
// A model's reply is untrusted input. Replies are assembled in time and
// memory linear in their size, and bounded: a response body over
// WithMaxResponseBytes, a reply text over WithMaxTextBytes or one tool
// call's arguments over WithMaxArgumentBytes end the call with a
// *provider.Error of KindResponseTooLarge that names the limit (defaults:
// provider.DefaultMaxResponseBytes, DefaultMaxTextBytes,
// DefaultMaxArgumentBytes). A stream that sends nothing of the reply
// (keep-alives do not count) for WithIdleTimeout, 10 minutes by default, ends
// with a KindTransient error. A stream line that is not JSON, and a
// successful status whose body holds no stream event (an HTML page, say),
// are KindMalformed; a refused redirect to another origin is
// KindBadRequest.
package openai

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/adapter"
)

// Name is the provider's name in errors and descriptions.
const Name = "openai"

// DefaultModel is the model used when neither WithModel nor OPENAI_MODEL
// names one.
const DefaultModel = "gpt-5.4-mini"

// defaultBaseURL is where the SDK sends requests when nothing overrides it.
const defaultBaseURL = "https://api.openai.com/v1/"

// Provider is a provider.Provider and provider.Streamer backed by the Chat
// Completions API. It is safe for concurrent use.
type Provider struct {
	client          oai.Client
	model           string
	baseURL         string
	legacyMaxTokens bool
	noFormat        bool // WithoutResponseFormat
	noCacheKey      bool // WithoutPromptCacheKey
	limits          adapter.Limits
	admission       *provider.Admission // nil: WithoutAdmission
	calls           adapter.Calls
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Streamer = (*Provider)(nil)
)

// Option configures New. An option given a value that cannot work makes
// New fail with an error that says what to pass instead; a nil Option is
// ignored.
type Option func(*config) error

type config struct {
	adapter.Common  // admission, retries, logger, HTTP client, limits
	apiKey          *string
	baseURL         *string
	model           *string
	legacyMaxTokens bool
	noFormat        bool
	noCacheKey      bool
	requestOptions  []option.RequestOption
}

// WithAPIKey sets the API key, overriding OPENAI_API_KEY. The key must not
// be empty; a local server that needs none accepts any placeholder.
func WithAPIKey(key string) Option {
	return func(c *config) error {
		if key == "" {
			return errors.New("WithAPIKey got an empty key; pass the key (a local server that needs none accepts any placeholder) or leave the option out to use OPENAI_API_KEY")
		}
		c.apiKey = &key
		return nil
	}
}

// WithBaseURL sets the server's base URL, e.g. "http://localhost:11434/v1"
// for Ollama, overriding OPENAI_BASE_URL. It must be an absolute http or
// https URL.
func WithBaseURL(u string) Option {
	return func(c *config) error {
		if err := adapter.CheckURL(u); err != nil {
			return fmt.Errorf("WithBaseURL(%q): %v; pass the server's URL, e.g. http://localhost:11434/v1", u, err)
		}
		c.baseURL = &u
		return nil
	}
}

// WithModel sets the model used when a Request names none, overriding
// OPENAI_MODEL. The name must not be empty.
func WithModel(name string) Option {
	return func(c *config) error {
		if name == "" {
			return fmt.Errorf("WithModel got an empty name; pass a model name such as %q, or leave the option out to use OPENAI_MODEL or the default", DefaultModel)
		}
		c.model = &name
		return nil
	}
}

// WithAdmission makes the provider's calls through a, shared with the
// other providers given it: give one Admission to every provider of a
// process that calls the same account, so that they keep to its limits
// together. a must not be nil; WithoutAdmission turns admission off.
func WithAdmission(a *provider.Admission) Option {
	return func(c *config) error { return c.SetAdmission(a) }
}

// WithoutAdmission turns admission control off: calls go as soon as they
// are made, and the SDK's own retry loop (WithMaxRetries) retries rate
// limits and failures.
func WithoutAdmission() Option {
	return func(c *config) error { return c.SetNoAdmission() }
}

// WithMaxRetries sets how many times the SDK retries a request that failed
// with a connection error, 408, 409, 429 or 5xx, honouring the server's
// retry-after headers. Zero disables retries. n must not be negative.
// Under admission control (the default) the SDK does not retry, so that
// two loops do not both retry: n is then the retries of the provider's
// own Admission (default provider.DefaultAdmissionRetries); an Admission
// given with WithAdmission has its own (provider.WithRetries).
// WithoutAdmission, n is the SDK's (default 2).
func WithMaxRetries(n int) Option {
	return func(c *config) error { return c.SetMaxRetries(n) }
}

// WithRetryTime bounds how long the provider's own Admission tries a call
// again after failures a retry may mend other than rate limits (a 5xx, an
// overload, a dropped connection), from the first (default
// provider.DefaultRetryTime, 30 seconds; see provider.WithRetryTime); a
// server that cannot be reached at all gets 2 seconds of it, so that a
// wrong URL fails the first call at once. d must not be negative. An
// Admission given with WithAdmission has its own (provider.WithRetryTime);
// WithoutAdmission, the SDK retries as WithMaxRetries says.
func WithRetryTime(d time.Duration) Option {
	return func(c *config) error { return c.SetRetryTime(d) }
}

// WithLogger logs each retry of the provider's own Admission to l, at
// Warn, with the model, the retry's number, the wait before it and the
// failure it follows (provider.WithLogger); each retry also goes to the
// call context's event sink as a provider.AdmissionEvent. l must not be
// nil. An Admission given with WithAdmission has its own logger
// (provider.WithLogger); WithoutAdmission, the SDK retries and logs
// nothing, and the option is refused.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { return c.SetLogger(l) }
}

// WithHTTPClient sets the HTTP client the SDK sends requests with. The
// client must not be nil.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) error { return c.SetHTTPClient(hc) }
}

// WithLegacyMaxTokens sends Request.MaxTokens as max_tokens instead of
// max_completion_tokens, for OpenAI-compatible servers that only know the
// older field. OpenAI's reasoning models reject max_tokens.
func WithLegacyMaxTokens() Option {
	return func(c *config) error { c.legacyMaxTokens = true; return nil }
}

// WithoutResponseFormat leaves Request.ResponseSchema out of the request,
// for OpenAI-compatible servers that reject response_format or ignore it
// badly. The agent still describes the shape in words.
func WithoutResponseFormat() Option {
	return func(c *config) error { c.noFormat = true; return nil }
}

// WithoutPromptCacheKey leaves Request.CacheKey out of the request, for
// OpenAI-compatible servers that reject prompt_cache_key.
func WithoutPromptCacheKey() Option {
	return func(c *config) error { c.noCacheKey = true; return nil }
}

// WithRequestOptions passes SDK request options through to every request,
// after the ones this package sets: extra headers, middleware, a request
// timeout.
func WithRequestOptions(opts ...option.RequestOption) Option {
	return func(c *config) error {
		c.requestOptions = append(c.requestOptions, opts...)
		return nil
	}
}

// New returns a Provider configured by the environment and opts. It reports
// an option value that cannot work, saying what to do instead, and so a
// provider for OpenAI's own server with no key at all, which would fail
// at its first call.
func New(opts ...Option) (*Provider, error) {
	c := config{Common: adapter.NewCommon()}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return nil, fmt.Errorf("%s: %w", Name, err)
		}
	}
	var ro []option.RequestOption

	baseURL := defaultBaseURL
	if env, ok := os.LookupEnv("OPENAI_BASE_URL"); ok {
		if env == "" {
			// The SDK would take an empty value as the base URL; fall back to
			// OpenAI's own, as for an unset variable.
			ro = append(ro, option.WithBaseURL(defaultBaseURL))
		} else if c.baseURL == nil {
			if err := adapter.CheckURL(env); err != nil {
				return nil, fmt.Errorf("openai: OPENAI_BASE_URL=%q: %v; set it to the server's URL, e.g. http://localhost:11434/v1", env, err)
			}
			baseURL = env
		}
	}
	if c.baseURL != nil {
		baseURL = *c.baseURL
		ro = append(ro, option.WithBaseURL(baseURL))
	}
	if c.apiKey != nil {
		ro = append(ro, option.WithAPIKey(*c.apiKey))
	} else if baseURL == defaultBaseURL && os.Getenv("OPENAI_API_KEY") == "" {
		// OpenAI's own server refuses every call without a key: say so
		// now, not at the first call. A local server may need none.
		return nil, errors.New("openai: no API key for " + defaultBaseURL + ": set OPENAI_API_KEY or pass WithAPIKey; for a server that needs none, give its URL with WithBaseURL or OPENAI_BASE_URL")
	}

	model := DefaultModel
	if env := os.Getenv("OPENAI_MODEL"); env != "" {
		model = env
	}
	if c.model != nil {
		model = *c.model
	}

	adm, sdkRetries, setRetries, err := c.Admit(Name)
	if err != nil {
		return nil, err
	}
	if setRetries {
		ro = append(ro, option.WithMaxRetries(sdkRetries))
	}
	if c.HTTPClient != nil {
		ro = append(ro, option.WithHTTPClient(c.HTTPClient))
	}
	ro = append(ro, limitBody(c.Limits.MaxResponseBytes))
	ro = append(ro, c.requestOptions...)

	p := &Provider{
		client:          oai.NewClient(ro...),
		model:           model,
		baseURL:         baseURL,
		legacyMaxTokens: c.legacyMaxTokens,
		noFormat:        c.noFormat,
		noCacheKey:      c.noCacheKey,
		limits:          c.Limits,
		admission:       adm,
	}
	p.calls = adapter.Calls{Admission: adm, Model: model, Once: p.complete, Streamed: p.streamed}
	return p, nil
}

// Name returns "openai", the OpenTelemetry gen_ai.provider.name of the
// API this provider speaks (provider.Namer).
func (p *Provider) Name() string { return "openai" }

// Model returns the model used when a Request names none.
func (p *Provider) Model() string { return p.model }

// BaseURL returns the URL of the server the provider talks to.
func (p *Provider) BaseURL() string { return p.baseURL }

// Admission returns the provider's admission control, or nil
// WithoutAdmission.
func (p *Provider) Admission() *provider.Admission { return p.admission }

// Complete sends req to the Chat Completions API, once admission control
// lets it go, and returns the model's reply.
func (p *Provider) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	return p.calls.Complete(ctx, req)
}

// streamed makes one streamed call.
func (p *Provider) streamed(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	params, err := p.params(req)
	if err != nil {
		return provider.Response{}, err
	}
	return p.stream(ctx, params, onDelta)
}

func (p *Provider) complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	params, err := p.params(req)
	if err != nil {
		return provider.Response{}, err
	}
	var (
		raw      []byte
		httpResp *http.Response
	)
	_, err = p.client.Chat.Completions.New(ctx, params,
		option.WithResponseBodyInto(&raw),
		option.WithResponseInto(&httpResp))
	if err != nil {
		return provider.Response{}, failure(ctx, err, httpResp)
	}
	resp, err := decodeCompletion(raw, adapter.Status(httpResp), p.limits)
	resp.RateLimit = adapter.RateLimit(httpResp)
	return resp, err
}

// Stream sends req to the Chat Completions API with streaming on, passes
// the reply to onDelta as it arrives, and returns it assembled, as Complete
// does.
func (p *Provider) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	return p.calls.Stream(ctx, req, onDelta)
}
