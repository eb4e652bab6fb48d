// Package anthropic is a deputy provider for Anthropic's Messages API.
//
// It is a thin adapter over the official SDK,
// github.com/anthropics/anthropic-sdk-go/v2: authentication and the wire
// format stay the SDK's job. The adapter maps deputy's provider vocabulary
// onto Messages and back, streams replies, classifies failures as
// *provider.Error, and sends each call through admission control (see Rate
// limits).
//
// # Configuration
//
// New reads the environment the way Anthropic's own tools do: the SDK finds
// the credentials (ANTHROPIC_API_KEY, or its other sources such as
// ANTHROPIC_AUTH_TOKEN) and ANTHROPIC_BASE_URL, and ANTHROPIC_MODEL names the
// default model (else DefaultModel). Options override the environment.
//
// # Mapping
//
//   - Request.System becomes the top-level system parameter.
//   - An assistant message becomes a text block followed by one tool_use block
//     per tool call. Arguments that are not a JSON object (a model's broken
//     output, kept in a conversation) are sent as {}, because the API accepts
//     nothing else; the tool's error result tells the model what went wrong.
//   - Consecutive tool messages become one user message with one tool_result
//     block each, in order, with is_error set from Message.IsError; a user
//     message right after them joins that same message, after the results.
//   - Tool call IDs are kept; characters the API does not allow in an ID
//     (anything but letters, digits, _ and -) become _, the same way in the
//     tool_use and the tool_result, so a conversation started with another
//     provider replays here.
//   - Empty text is left out: the API rejects empty text blocks.
//   - Request.MaxTokens defaults to DefaultMaxTokens (WithMaxTokens changes
//     it), because the API requires a cap.
//   - Request.ResponseSchema becomes output_config.format (json_schema),
//     narrowed to the subset the API takes: objects that leave
//     additionalProperties out are closed, a type list becomes anyOf, and
//     bounds the API refuses (minimum, maxLength, pattern, …) are left out,
//     the caller's own validation still holding them. A schema that cannot
//     be narrowed (a free-form object, an unknown keyword) is not sent:
//     the agent's prompt describes it instead. WithoutOutputFormat never
//     sends one.
//   - Prompt caching: cache_control breakpoints mark the end of the
//     system prompt (or of the tools, without one), the end of the
//     previous user turn (where the last request ended, in a loop or a
//     resident's conversation) and the end of the conversation, so that a
//     repeated prefix is read from the cache at a tenth of the input price
//     rather than billed in full on every call; with Request.SharedPrefix,
//     a fourth marks the end of the messages a request shares with others
//     (a parent's conversation its context forks start from), so that
//     every fork reads it. WithoutPromptCaching sends none.
//     Request.CacheKey is not sent: the API has no such parameter.
//   - Request.Temperature is not sent: the API version this SDK speaks has no
//     temperature parameter.
//   - Usage.InputTokens counts every input token, including those read from
//     or written to the prompt cache, which CacheReadTokens and
//     CacheWriteTokens report separately.
//   - Complete asks for a stream behind the scenes when the SDK says a
//     non-streamed reply of MaxTokens would take too long.
//
// # Errors
//
// Every failure is a *provider.Error whose Err holds the SDK's error (an
// *anthropic.Error for API errors). 529 (overloaded) is KindTransient; a 400
// saying the prompt is too long is KindContextWindow. The caller's own
// cancellation is reported as an error wrapping ctx.Err() instead, so that
// errors.Is(err, context.Canceled) holds.
//
// # Rate limits
//
// Each call waits for admission (provider.Admission) until the model's
// limits let it go, instead of failing with a rate limit: requests and
// tokens a minute as the server's anthropic-ratelimit-* headers and
// Retry-After say, and an adaptive bound on calls in flight. A 429 is tried
// again after the wait the server asked for, up to
// provider.DefaultAdmissionRetries times; an overload (529) narrows the
// bound on calls in flight, and the call is tried again after a backoff.
// The SDK's own retry loop is off, so that only one loop retries. Every
// Response and rate-limited *provider.Error carries what the server said
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
// URL and says to set it with WithBaseURL or ANTHROPIC_BASE_URL. Each retry is logged
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
//
// The HTTP client refuses a redirect to another origin, which would receive
// the conversation, unless the client given to WithHTTPClient has a redirect
// policy of its own.
package anthropic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/adapter"
)

// Name is the provider's name in errors and descriptions.
const Name = "anthropic"

// DefaultModel is the model used when neither WithModel nor ANTHROPIC_MODEL
// names one.
const DefaultModel = "claude-sonnet-5-5"

// DefaultMaxTokens caps a reply when neither the Request nor WithMaxTokens
// does; the Messages API requires a cap.
const DefaultMaxTokens = 4096

// defaultBaseURL is where the SDK sends requests when nothing overrides it.
const defaultBaseURL = "https://api.anthropic.com/"

// Provider is a provider.Provider and provider.Streamer backed by the Messages
// API. It is safe for concurrent use.
type Provider struct {
	client    ant.Client
	model     string
	baseURL   string
	maxTokens int
	noFormat  bool // WithoutOutputFormat
	noCache   bool // WithoutPromptCaching
	limits    adapter.Limits
	admission *provider.Admission // nil: WithoutAdmission
	calls     adapter.Calls
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
	adapter.Common // admission, retries, logger, HTTP client, limits
	apiKey         *string
	baseURL        *string
	model          *string
	maxTokens      int
	noFormat       bool
	noCache        bool
	requestOptions []option.RequestOption
}

// WithAPIKey sets the API key, overriding the credentials the SDK would find
// in the environment. The key must not be empty.
func WithAPIKey(key string) Option {
	return func(c *config) error {
		if key == "" {
			return errors.New("WithAPIKey got an empty key; pass the key or leave the option out to use ANTHROPIC_API_KEY")
		}
		c.apiKey = &key
		return nil
	}
}

// WithBaseURL sets the server's base URL, overriding ANTHROPIC_BASE_URL. It
// must be an absolute http or https URL.
func WithBaseURL(u string) Option {
	return func(c *config) error {
		if err := adapter.CheckURL(u); err != nil {
			return fmt.Errorf("WithBaseURL(%q): %v; pass the server's URL, e.g. %s", u, err, defaultBaseURL)
		}
		c.baseURL = &u
		return nil
	}
}

// WithModel sets the model used when a Request names none, overriding
// ANTHROPIC_MODEL. The name must not be empty.
func WithModel(name string) Option {
	return func(c *config) error {
		if name == "" {
			return fmt.Errorf("WithModel got an empty name; pass a model name such as %q, or leave the option out to use ANTHROPIC_MODEL or the default", DefaultModel)
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
// limits, overloads and failures.
func WithoutAdmission() Option {
	return func(c *config) error { return c.SetNoAdmission() }
}

// WithMaxRetries sets how many times the SDK retries a request that failed
// with a connection error, 408, 409, 429 or 5xx (529 included), honouring the
// server's retry-after headers. Zero disables retries. n must not be
// negative. Under admission control (the default) the SDK does not retry,
// so that two loops do not both retry: n is then the retries of the
// provider's own Admission (default provider.DefaultAdmissionRetries); an
// Admission given with WithAdmission has its own (provider.WithRetries).
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

// WithMaxTokens sets the cap on a reply's length used when a Request sets
// none, instead of DefaultMaxTokens. n must be positive.
func WithMaxTokens(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("WithMaxTokens(%d): the cap must be positive; pass a token count such as %d", n, DefaultMaxTokens)
		}
		c.maxTokens = n
		return nil
	}
}

// WithHTTPClient sets the HTTP client the SDK sends requests with. The
// client must not be nil.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) error { return c.SetHTTPClient(hc) }
}

// WithoutOutputFormat leaves Request.ResponseSchema out of the request,
// for models or compatible servers without structured output. The agent
// still describes the shape in words.
func WithoutOutputFormat() Option {
	return func(c *config) error { c.noFormat = true; return nil }
}

// WithoutPromptCaching sends no cache_control breakpoints, for servers that
// reject them or when cache writes (billed above the input price) do not
// pay for themselves.
func WithoutPromptCaching() Option {
	return func(c *config) error { c.noCache = true; return nil }
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
// an option value that cannot work, saying what to do instead.
func New(opts ...Option) (*Provider, error) {
	c := config{maxTokens: DefaultMaxTokens, Common: adapter.NewCommon()}
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
	if env := os.Getenv("ANTHROPIC_BASE_URL"); env != "" && c.baseURL == nil {
		if err := adapter.CheckURL(env); err != nil {
			return nil, fmt.Errorf("anthropic: ANTHROPIC_BASE_URL=%q: %v; set it to the server's URL or unset it", env, err)
		}
		baseURL = env
	}
	if c.baseURL != nil {
		baseURL = *c.baseURL
		ro = append(ro, option.WithBaseURL(baseURL))
	}
	if c.apiKey != nil {
		ro = append(ro, option.WithAPIKey(*c.apiKey))
	}

	model := DefaultModel
	if env := os.Getenv("ANTHROPIC_MODEL"); env != "" {
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
	// The body cap sits in the transport: the SDK takes any middleware for
	// one that authenticates, and would then send a request without a key.
	ro = append(ro, option.WithHTTPClient(limitedClient(c.HTTPClient, c.Limits.MaxResponseBytes)))
	ro = append(ro, c.requestOptions...)

	p := &Provider{
		client:    ant.NewClient(ro...),
		model:     model,
		baseURL:   baseURL,
		maxTokens: c.maxTokens,
		noFormat:  c.noFormat,
		noCache:   c.noCache,
		limits:    c.Limits,
		admission: adm,
	}
	p.calls = adapter.Calls{Admission: adm, Model: model, Once: p.complete, Streamed: p.streamed}
	return p, nil
}

// Name returns "anthropic", the OpenTelemetry gen_ai.provider.name of the
// API this provider speaks (provider.Namer).
func (p *Provider) Name() string { return "anthropic" }

// Model returns the model used when a Request names none.
func (p *Provider) Model() string { return p.model }

// BaseURL returns the URL of the server the provider talks to.
func (p *Provider) BaseURL() string { return p.baseURL }

// Admission returns the provider's admission control, or nil
// WithoutAdmission.
func (p *Provider) Admission() *provider.Admission { return p.admission }

// Complete sends req to the Messages API, once admission control lets it
// go, and returns the model's reply.
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
	if _, err := ant.CalculateNonStreamingTimeout(int(params.MaxTokens), params.Model, nil); err != nil {
		// The SDK refuses a non-streamed call this long; stream and collect.
		return p.stream(ctx, params, nil)
	}
	var (
		raw      []byte
		httpResp *http.Response
	)
	_, err = p.client.Messages.New(ctx, params,
		option.WithResponseBodyInto(&raw),
		option.WithResponseInto(&httpResp))
	if err != nil {
		return provider.Response{}, failure(ctx, err, httpResp)
	}
	resp, err := decodeMessage(raw, adapter.Status(httpResp), p.limits)
	resp.RateLimit = adapter.RateLimit(httpResp)
	return resp, err
}

// Stream sends req to the Messages API with streaming on, passes the reply
// to onDelta as it arrives, and returns it assembled, as Complete does.
func (p *Provider) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	return p.calls.Stream(ctx, req, onDelta)
}
