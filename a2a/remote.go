package a2a

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Limits on what a remote agent sends. Each has a RemoteOption to change it.
const (
	// DefaultMaxCardBytes bounds an agent card (WithMaxCardBytes).
	DefaultMaxCardBytes = 256 << 10
	// DefaultMaxSkills bounds the skills a card lists (WithMaxSkills).
	DefaultMaxSkills = 100
	// DefaultMaxAnswerBytes bounds the text and data of a remote task's
	// artifacts (WithMaxAnswerBytes).
	DefaultMaxAnswerBytes = 1 << 20
	// DefaultMaxStreamBytes bounds one response, a stream included
	// (WithMaxStreamBytes).
	DefaultMaxStreamBytes = 16 << 20
	// DefaultMaxEvents bounds the events of one message's stream
	// (WithMaxEvents).
	DefaultMaxEvents = 10000
	// DefaultIdleTimeout is how long a remote agent may send nothing
	// before it is given up on (WithIdleTimeout).
	DefaultIdleTimeout = 2 * time.Minute
	// maxRounds bounds the questions one delegation may ask in turn.
	maxRounds = 32
)

// Errors a Remote's calls wrap.
var (
	// ErrRemote: the remote agent failed the task, sent what cannot be
	// read, or broke a limit.
	ErrRemote = errors.New("a2a: remote agent")
	// ErrOrigin: a card named, or a response redirected to, an origin
	// the Remote was not allowed to reach.
	ErrOrigin = errors.New("a2a: origin not allowed")
)

// RemoteOption configures a Remote.
type RemoteOption func(*remoteConfig) error

type remoteConfig struct {
	httpc       *http.Client
	header      http.Header
	credentials map[sdk.SecuritySchemeName]string
	origins     []string
	maxCard     int64
	maxSkills   int
	maxAnswer   int
	maxStream   int64
	maxEvents   int
	idle        time.Duration
	name        string
	description string
}

// WithHTTPClient sends every request with c (its transport, timeouts,
// TLS and cookies). The Remote bounds what c reads and checks where it
// goes on top of it.
func WithHTTPClient(c *http.Client) RemoteOption {
	return func(rc *remoteConfig) error { rc.httpc = c; return nil }
}

// WithHeader adds a header to every request to the remote agent, its
// card's included (an API key, a bearer token).
func WithHeader(name, value string) RemoteOption {
	return func(rc *remoteConfig) error {
		if rc.header == nil {
			rc.header = http.Header{}
		}
		rc.header.Add(name, value)
		return nil
	}
}

// WithCredential gives the credential for a security scheme the card
// declares (an API key, a bearer token, an OAuth2 access token the
// application obtained); it is sent as the scheme says on each request
// the card's requirements name it for.
func WithCredential(scheme, credential string) RemoteOption {
	return func(rc *remoteConfig) error {
		if rc.credentials == nil {
			rc.credentials = map[sdk.SecuritySchemeName]string{}
		}
		rc.credentials[sdk.SecuritySchemeName(scheme)] = credential
		return nil
	}
}

// WithAllowedOrigins lets the card name interfaces on these origins
// ("https://agents.example.com") besides the card's own.
func WithAllowedOrigins(origins ...string) RemoteOption {
	return func(rc *remoteConfig) error {
		for _, o := range origins {
			u, err := url.Parse(o)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("a2a: WithAllowedOrigins(%q): give scheme://host[:port]", o)
			}
			rc.origins = append(rc.origins, u.Scheme+"://"+u.Host)
		}
		return nil
	}
}

// WithMaxCardBytes bounds the agent card.
func WithMaxCardBytes(n int64) RemoteOption {
	return positive("WithMaxCardBytes", n, func(rc *remoteConfig) { rc.maxCard = n })
}

// WithMaxSkills bounds the skills the card lists.
func WithMaxSkills(n int) RemoteOption {
	return positive("WithMaxSkills", n, func(rc *remoteConfig) { rc.maxSkills = n })
}

// WithMaxAnswerBytes bounds the text and data of a remote task's answer.
func WithMaxAnswerBytes(n int) RemoteOption {
	return positive("WithMaxAnswerBytes", n, func(rc *remoteConfig) { rc.maxAnswer = n })
}

// WithMaxStreamBytes bounds one response from the remote agent.
func WithMaxStreamBytes(n int64) RemoteOption {
	return positive("WithMaxStreamBytes", n, func(rc *remoteConfig) { rc.maxStream = n })
}

// WithMaxEvents bounds the events of the stream of one message.
func WithMaxEvents(n int) RemoteOption {
	return positive("WithMaxEvents", n, func(rc *remoteConfig) { rc.maxEvents = n })
}

// WithIdleTimeout is how long the remote agent may send nothing.
func WithIdleTimeout(d time.Duration) RemoteOption {
	return positive("WithIdleTimeout", d, func(rc *remoteConfig) { rc.idle = d })
}

// WithRemoteName names the remote agent as a tool (default: its card's
// name, made a valid tool name).
func WithRemoteName(name string) RemoteOption {
	return func(rc *remoteConfig) error { rc.name = name; return nil }
}

// WithRemoteDescription describes the remote agent to the model that
// calls it (default: its card's description and skills).
func WithRemoteDescription(d string) RemoteOption {
	return func(rc *remoteConfig) error { rc.description = d; return nil }
}

func positive[T int | int64 | time.Duration](name string, n T, set func(*remoteConfig)) RemoteOption {
	return func(rc *remoteConfig) error {
		if n <= 0 {
			return fmt.Errorf("a2a: %s(%v): give a positive bound", name, n)
		}
		set(rc)
		return nil
	}
}

// Remote is a remote A2A agent, reached through its card: an agent.Agent
// whose runs send the task as a message and wait for the remote task to
// end, and (Tool) a sub-agent a model delegates to. Its methods are safe
// for concurrent use. Close it when done.
type Remote struct {
	cfg    remoteConfig
	base   string // the URL the card was read from
	origin string
	httpc  *http.Client
	name   string
	desc   string

	mu     sync.Mutex
	card   *sdk.AgentCard
	client *a2aclient.Client
}

// Connect reads the agent card at baseURL (its well-known path,
// /.well-known/agent-card.json, under baseURL) and returns the remote
// agent it describes. The card is bounded in size and skills, and the
// interfaces it names must be on the card's own origin (or one allowed
// with WithAllowedOrigins); no request follows a redirect to another
// origin.
func Connect(ctx context.Context, baseURL string, opts ...RemoteOption) (*Remote, error) {
	rc := remoteConfig{maxCard: DefaultMaxCardBytes, maxSkills: DefaultMaxSkills, maxAnswer: DefaultMaxAnswerBytes,
		maxStream: DefaultMaxStreamBytes, maxEvents: DefaultMaxEvents, idle: DefaultIdleTimeout}
	for _, o := range opts {
		if err := o(&rc); err != nil {
			return nil, err
		}
	}
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("a2a: Connect(%q): give the http or https URL the agent is served at", baseURL)
	}
	r := &Remote{cfg: rc, base: strings.TrimSuffix(baseURL, "/"), origin: u.Scheme + "://" + u.Host}
	r.httpc = r.boundedClient()
	if err := r.Refresh(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Refresh reads the remote agent's card again, and uses the interfaces it
// names from the next call on. A card that breaks a bound or names an
// origin not allowed is refused, and the Remote keeps the card it had.
func (r *Remote) Refresh(ctx context.Context) error {
	card, err := r.fetchCard(ctx)
	if err != nil {
		return err
	}
	opts := []a2aclient.FactoryOption{
		a2aclient.WithJSONRPCTransport(r.httpc),
		a2aclient.WithRESTTransport(r.httpc),
	}
	if len(r.cfg.credentials) > 0 {
		creds := a2aclient.NewInMemoryCredentialsStore()
		for scheme, c := range r.cfg.credentials {
			creds.Set(credentialSession, scheme, a2aclient.AuthCredential(c))
		}
		opts = append(opts, a2aclient.WithCallInterceptors(&a2aclient.AuthInterceptor{Service: creds}))
	}
	client, err := a2aclient.NewFromCard(ctx, card, opts...)
	if err != nil {
		return fmt.Errorf("%w %s: its card names no interface this client speaks (JSON-RPC or HTTP+JSON): %v", ErrRemote, r.base, clipError(err, maxErrorBytes))
	}
	r.mu.Lock()
	old := r.client
	r.card, r.client = card, client
	if r.name == "" {
		r.name = cmp.Or(r.cfg.name, toolName(card.Name))
		r.desc = cmp.Or(r.cfg.description, describe(card))
	}
	r.mu.Unlock()
	if old != nil {
		old.Destroy()
	}
	return nil
}

const credentialSession a2aclient.SessionID = "deputy"

// Card returns the card the Remote uses.
func (r *Remote) Card() *sdk.AgentCard {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.card
}

// Name is the remote agent's name as a tool.
func (r *Remote) Name() string { return r.name }

// Close releases the Remote's connections.
func (r *Remote) Close() error {
	r.mu.Lock()
	c := r.client
	r.client = nil
	r.mu.Unlock()
	if c != nil {
		return c.Destroy()
	}
	return nil
}

// Tool returns the remote agent as a sub-agent tool (subagent.FromFactory
// around the Remote): what it answers is checked and capped as any
// child's (subagent.WithOutputSchema, WithMaxOutput), it is journaled and
// replayed as any child, and it may join a spawn tool's roster
// (subagent.WithRoster). Calls run in parallel.
func (r *Remote) Tool(opts ...subagent.Option) (*subagent.SubAgentTool, error) {
	run := agent.Func(r.Run)
	return subagent.FromFactory(r.name, r.desc, func(context.Context, json.RawMessage) (agent.Agent, error) {
		return run, nil
	}, opts...)
}

func (r *Remote) fetchCard(ctx context.Context) (*sdk.AgentCard, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/.well-known/agent-card.json", nil)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrRemote, r.base, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.httpc.Do(req)
	if err != nil {
		var be *boundError
		if errors.As(err, &be) {
			err = be
		}
		return nil, fmt.Errorf("%w %s: reading its card: %w", ErrRemote, r.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w %s: reading its card: HTTP %d", ErrRemote, r.base, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, r.cfg.maxCard+1))
	if err != nil {
		var be *boundError
		if errors.As(err, &be) {
			err = be
		}
		return nil, fmt.Errorf("%w %s: reading its card: %w", ErrRemote, r.base, err)
	}
	if int64(len(body)) > r.cfg.maxCard {
		return nil, fmt.Errorf("%w %s: its card is over %d bytes (WithMaxCardBytes)", ErrRemote, r.base, r.cfg.maxCard)
	}
	card, err := agentcard.DefaultCardParser(body)
	if err != nil {
		return nil, fmt.Errorf("%w %s: its card is not an agent card: %v", ErrRemote, r.base, clipError(err, maxErrorBytes))
	}
	if len(card.Skills) > r.cfg.maxSkills {
		return nil, fmt.Errorf("%w %s: its card lists %d skills, over %d (WithMaxSkills)", ErrRemote, r.base, len(card.Skills), r.cfg.maxSkills)
	}
	if len(card.SupportedInterfaces) == 0 {
		return nil, fmt.Errorf("%w %s: its card names no interface", ErrRemote, r.base)
	}
	for _, i := range card.SupportedInterfaces {
		if i == nil {
			return nil, fmt.Errorf("%w %s: its card names an empty interface", ErrRemote, r.base)
		}
		if err := r.allowed(i.URL); err != nil {
			return nil, fmt.Errorf("%w: %s's card names the interface %q: %v", ErrOrigin, r.base, clip(i.URL, 200), err)
		}
	}
	return card, nil
}

// allowed checks that raw is an http(s) URL on an origin the Remote may
// reach.
func (r *Remote) allowed(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return errors.New("not an http or https URL without credentials")
	}
	o := u.Scheme + "://" + u.Host
	if o == r.origin || slices.Contains(r.cfg.origins, o) {
		return nil
	}
	return fmt.Errorf("%s is neither the card's origin %s nor one allowed with WithAllowedOrigins", clip(o, 200), r.origin)
}

// toolName makes a card's name a tool name: letters, digits, _ and -.
func toolName(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
			b.WriteRune(c)
		case c == ' ' || c == '.':
			b.WriteByte('_')
		}
		if b.Len() >= 64 {
			break
		}
	}
	if b.Len() == 0 {
		return "remote_agent"
	}
	return b.String()
}

func describe(card *sdk.AgentCard) string {
	var b strings.Builder
	b.WriteString(clip(card.Description, 1000))
	for i, s := range card.Skills {
		if i == 10 {
			break
		}
		fmt.Fprintf(&b, "\n- %s: %s", clip(s.Name, 100), clip(s.Description, 300))
	}
	return b.String()
}

// round is one message to the remote agent and where its task stood when
// the stream of it ended, as the journal keeps it.
type round struct {
	TaskID    string           `json:"taskId,omitempty"`
	ContextID string           `json:"contextId,omitempty"`
	State     sdk.TaskState    `json:"state"`
	Text      string           `json:"text,omitempty"`
	Value     json.RawMessage  `json:"value,omitempty"`
	Questions []tool.Interrupt `json:"questions,omitempty"`
	Usage     provider.Usage   `json:"usage"`
	Cost      float64          `json:"cost,omitempty"`
}

// maxTaskCost bounds, in US dollars, what a remote may report one task
// cost: a figure past it is refused, not counted.
const maxTaskCost = 1e6

// Run sends in.Text to the remote agent as a new task and waits for the
// task to end. What the task streams reaches ctx's event sink as the
// run's own events (its text, and the sub-agents of a deputy remote,
// attributed under the run). A task that asks for input suspends the run
// with a question (tool.Ask); the resumed run sends the answer on the same
// task and context, and goes on. Under a journal (agent.WithJournal) each
// message is sent once per turn: the resumed run finds where the task
// stood without sending it again. A message on its way when its process
// died is sent again on resume, under the same messageId (derived from
// the turn's journal): a deputy Server answers a first message it has seen
// with the task that message started, which runs once, where an agent that
// does not keep message ids starts a second task; an answer the task took
// then it refuses, and the run follows the task to where it stands. What a deputy remote reports its task cost (costUsd,
// at its own prices) is the run's Cost, and counts in the cost of the runs
// ctx is in, under their cost limits; a report of more than $1,000,000 is
// refused with ErrRemote.
func (r *Remote) Run(ctx context.Context, in agent.Input) (agent.Output, error) {
	out := agent.Output{RunID: agent.RunID(ctx)}
	text := in.Text
	if text == "" && len(in.Messages) > 0 {
		text = in.Messages[len(in.Messages)-1].Content
	}
	msg := sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart(text))
	var charged []provider.ModelUsage // what the task's rounds charged so far, with out.Cost
	for range maxRounds {
		var fresh round
		exchanged := false
		raw, err := tool.Once(ctx, "a2a.message", func(ctx context.Context) (json.RawMessage, error) {
			exchanged = true
			if sum := journal.OnceSum(ctx); sum != nil {
				msg.ID = messageID(sum, msg)
			}
			rd, err := r.exchange(ctx, msg)
			fresh = round{Usage: rd.Usage, Cost: rd.Cost}
			if err != nil {
				return nil, err
			}
			return json.Marshal(rd)
		})
		// A task reports its whole usage so far in every round, the rounds
		// before included: the last report stands. A round the journal
		// answers (the turn resumed) was spent by an earlier run of it.
		if !fresh.Usage.IsZero() {
			out.Usage = fresh.Usage
		}
		if err != nil {
			if fresh.Cost <= maxTaskCost {
				r.charge(ctx, &out, &charged, fresh, false)
			}
			return out, err
		}
		var rd round
		if err := json.Unmarshal(raw, &rd); err != nil {
			return out, fmt.Errorf("%w %s: a journaled message is damaged: %v", ErrRemote, r.name, err)
		}
		if !exchanged {
			out.Usage, out.Earlier = rd.Usage, rd.Usage
		}
		if rd.Cost > maxTaskCost {
			return out, fmt.Errorf("%w %s: task %s reports it cost $%g, over $%g: not a cost to trust", ErrRemote, r.name, rd.TaskID, rd.Cost, float64(maxTaskCost))
		}
		r.charge(ctx, &out, &charged, rd, !exchanged)
		switch rd.State {
		case sdk.TaskStateCompleted:
			out.Answer = rd.Text
			if len(rd.Value) > 0 && rd.Text == "" {
				out.Answer = string(rd.Value)
			}
			return out, nil
		case sdk.TaskStateInputRequired, sdk.TaskStateAuthRequired:
			reply, err := r.ask(ctx, rd)
			if err != nil {
				return out, err
			}
			msg = reply
			msg.TaskID, msg.ContextID = sdk.TaskID(rd.TaskID), rd.ContextID
		default:
			return out, fmt.Errorf("%w %s: task %s ended %s: %s", ErrRemote, r.name, rd.TaskID, stateName(rd.State), clip(rd.Text, 2000))
		}
	}
	return out, fmt.Errorf("%w %s: asked for input %d times in one task: giving up", ErrRemote, r.name, maxRounds)
}

// messageID is the id of msg sent in the journaled step whose key sums
// to sum: the same in every run of the turn, so that a message a run sent
// before its process died goes again under the same id, which a deputy
// remote knows (a first message is answered with the task it started).
// The message's parts are in it too: a turn of another journal that
// happens to share the name does not send the same id for another task.
func messageID(sum []byte, msg *sdk.Message) string {
	h := sha256.New()
	h.Write(sum)
	if parts, err := json.Marshal(msg.Parts); err == nil {
		h.Write(parts)
	}
	return "deputy-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// charge counts what a deputy remote reports its task cost so far
// (rd.Cost, the whole task's), past what the rounds before charged (out.Cost,
// with usage charged), in the caller's cost, as a model call of the
// caller's tree would count (under "a2a/" and the remote's name in its
// usage by model), so that its cost limit and the runs it is inside count
// it; a round the journal answered (earlier) counts as spent by an earlier
// run of the turn, as a replayed call does. The remote's figure stands:
// the caller sees none of the remote's models to price. A remote that
// reports no cost charges nothing.
func (r *Remote) charge(ctx context.Context, out *agent.Output, charged *[]provider.ModelUsage, rd round, earlier bool) {
	if rd.Cost <= out.Cost {
		return
	}
	m := provider.ModelUsage{Provider: "a2a", Model: r.name, Usage: run.Minus(rd.Usage, *charged), Cost: rd.Cost - out.Cost}
	ledger.Charge(ctx, m, "", true, earlier)
	*charged = append(*charged, m)
	out.Cost = rd.Cost
	if earlier {
		out.EarlierCost = rd.Cost
	}
}

// ask asks, in the caller's tree, the questions a remote task waits on,
// and returns the message that answers them. A deputy remote names its
// questions (reason, schema) and gets each answer back under its id;
// another agent asked in words gets the answer as text, or as data when
// it is not a string.
func (r *Remote) ask(ctx context.Context, rd round) (*sdk.Message, error) {
	call := tool.Call{ID: "a2a_" + rd.TaskID, Name: r.name, Arguments: json.RawMessage(`{}`)}
	if len(rd.Questions) == 0 {
		q := tool.Question{Reason: "input", Message: cmp.Or(rd.Text, r.name+" asks for input.")}
		if rd.State == sdk.TaskStateAuthRequired {
			q.Reason = "auth"
		}
		payload, err := tool.Ask(ctx, call, q)
		if err != nil {
			return nil, err
		}
		var s string
		if json.Unmarshal(payload, &s) == nil {
			return sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart(s)), nil
		}
		var v any
		_ = json.Unmarshal(payload, &v)
		return sdk.NewMessage(sdk.MessageRoleUser, sdk.NewDataPart(v)), nil
	}
	var answers []tool.Answer
	var pending []tool.Interrupt
	for _, q := range rd.Questions {
		payload, err := tool.Ask(ctx, call, tool.Question{Reason: q.Reason, Message: q.Message, ResponseSchema: q.ResponseSchema})
		var in *tool.Interrupted
		switch {
		case errors.As(err, &in):
			pending = append(pending, in.Interrupts...)
		case errors.Is(err, tool.ErrCancelled):
			answers = append(answers, tool.Answer{InterruptID: q.ID, Status: tool.Cancelled})
		case err != nil:
			return nil, err
		default:
			answers = append(answers, tool.Answer{InterruptID: q.ID, Status: tool.Resolved, Payload: payload})
		}
	}
	if len(pending) > 0 {
		return nil, &tool.Interrupted{Interrupts: pending}
	}
	return sdk.NewMessage(sdk.MessageRoleUser, sdk.NewDataPart(generic(map[string]any{"answers": answers}))), nil
}

func stateName(s sdk.TaskState) string {
	return strings.ToLower(strings.TrimPrefix(string(s), "TASK_STATE_"))
}
