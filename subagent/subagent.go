package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/delegates"
	"github.com/deputy-go/deputy/internal/exactkeys"
	"github.com/deputy-go/deputy/internal/guardrail"
	"github.com/deputy-go/deputy/internal/jsonvalue"
	"github.com/deputy-go/deputy/internal/subcode"
	"github.com/deputy-go/deputy/internal/toolcall"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// Errors of calls and spawns (errors.Is); the model reads and corrects them.
var (
	ErrMaxDepth      = errors.New("subagent: max delegation depth reached")    // past the depth cap
	ErrBusy          = subcode.ErrBusy                                         // a resident answering another call (WithRefuseWhenBusy)
	ErrChildFailed   = errors.New("subagent: child failed")                    // the child's run failed; its error wrapped too
	ErrNoJSON        = subcode.ErrNoJSON                                       // no JSON in the answer, even after the retry
	ErrTimeout       = subcode.ErrTimeout                                      // longer than WithTimeout
	ErrNoScope       = errors.New("subagent: the call's scope cannot be told") // the Scope could not name one
	ErrUnknownModel  = errors.New("subagent: model not on the menu")           // a spawn named a model off WithModelMenu's menu; nothing ran
	ErrMaxSpawns     = errors.New("subagent: spawn limit reached")             // the run started WithMaxSpawns children
	ErrNoBudget      = errors.New("subagent: no token budget left")            // the run's tokens spent or set aside
	ErrDenied        = errors.New("subagent: spawning denied")                 // by WithSpawnPolicy
	ErrUnknownJob    = errors.New("subagent: unknown job")                     // no job of that id in the run
	ErrJobEnded      = errors.New("subagent: job has ended")                   // it takes no more messages
	ErrMaxBackground = errors.New("subagent: too many background jobs")        // WithMaxBackground jobs alive
)

// Factory builds one call's agent from its arguments (docs/subagents.md).
type Factory func(ctx context.Context, args json.RawMessage) (agent.Agent, error)

// SubAgentTool is a child agent exposed as a tool, safe for concurrent use.
type SubAgentTool struct {
	def    tool.Definition
	params *jsonschema.Schema
	cfg    config

	resident agent.Agent         // FromAgent
	turn     *semaphore.Weighted // FromAgent: one call at a time
	pause    *residentPause      // FromAgent: a call suspended for answers
	factory  Factory             // FromFactory and FromReact
	scoped   *scopes             // FromScoped: a resident per scope

	// A fork with a token budget (the spawn tool): all the runs of one
	// call share budget, and limited builds each with what is left.
	budget  int64
	limited func(left int64) (agent.Agent, error)

	// model is the model a spawn tool's fork was set to run on
	// (WithModelMenu), announced on SUBAGENT_STARTED; "" for every other.
	model string

	// shapeTold: the child's system prompt, or its task, already describes
	// the answer's shape (FromReact, forks, a roster member given a shape
	// in its task), so the call does not add it to the first question.
	shapeTold bool
	// forkTask, when set, is what a context fork is told before its task
	// instead of its own system prompt, which it does not send
	// (FromReact's).
	forkTask func(args json.RawMessage) string
	// probe is a FromReact child as its options build it, which an agent
	// given the tool checks for a policy wider than its own (delegatesOf).
	probe *agent.React
}

func init() { delegates.Of = delegatesOf }

// delegatesOf returns the agents t hands work to that are known now: a
// FromAgent's resident, a FromReact child as its options build it, a
// spawn tool's fork as its options build it, and those of its roster
// members. A FromFactory or FromScoped child is built later, by its
// function, and checked when it runs.
func delegatesOf(t tool.Tool) []any {
	switch t := t.(type) {
	case *SubAgentTool:
		switch {
		case t.resident != nil:
			return []any{t.resident}
		case t.probe != nil:
			return []any{t.probe}
		}
	case *Spawner:
		var out []any
		if t.probe != nil {
			out = append(out, t.probe)
		}
		for _, m := range t.cfg.roster {
			out = append(out, delegatesOf(m)...)
		}
		return out
	}
	return nil
}

// FromAgent returns a resident expert, whose calls take turns.
func FromAgent(name, description string, a agent.Agent, opts ...Option) (*SubAgentTool, error) {
	if a == nil {
		return nil, fmt.Errorf("subagent %q: nil agent: pass the agent to consult", name)
	}
	t, err := build(name, description, taskParams, formAgent, opts)
	if err != nil {
		return nil, err
	}
	t.defaultToTask()
	if t.cfg.durable != nil {
		if _, ok := a.(Persistent); !ok {
			return nil, fmt.Errorf("subagent %q: WithStore: the agent (%T) cannot save its conversation: use an *agent.React or implement subagent.Persistent", name, a)
		}
	}
	t.resident = a
	t.turn = semaphore.NewWeighted(1)
	t.pause = &residentPause{}
	return t, nil
}

// FromFactory returns a fresh agent per call; its run refuses a wider policy.
func FromFactory(name, description string, factory Factory, opts ...Option) (*SubAgentTool, error) {
	if factory == nil {
		return nil, fmt.Errorf("subagent %q: nil factory: pass a function that builds the agent", name)
	}
	t, err := build(name, description, taskParams, formFactory, opts)
	if err != nil {
		return nil, err
	}
	t.defaultToTask()
	// The agent the factory builds, and a policy of its own, exist only
	// once a call builds it: no constructor can see them, so a policy
	// wider than the one the call inherits is refused when that agent
	// runs (a *policy.Widening, before its first model call), not here.
	t.factory = factory
	return t, nil
}

// FromReact returns a child the model defines, a ReAct agent over p.
func FromReact(name, description string, p provider.Provider, tools *tool.Registry, opts ...Option) (*SubAgentTool, error) {
	if p == nil {
		return nil, fmt.Errorf("subagent %q: nil provider: pass the provider the children run on", name)
	}
	t, err := build(name, description, reactParams, formReact, opts)
	if err != nil {
		return nil, err
	}
	switch {
	case t.cfg.input != nil:
	case t.cfg.params == nil:
		t.cfg.input = reactInput
	default:
		t.cfg.input = paramsTaskInput
	}
	// The system prompt given with WithReactOptions, if any, is read once
	// from an agent built with those options (which also reports a bad
	// option now rather than on every call).
	base := make([]agent.Option, 0, len(t.cfg.reactOpts)+3)
	base = append(base, agent.WithName(name), agent.WithRegistry(tools))
	base = append(base, t.cfg.reactOpts...)
	probe, err := agent.NewReact(p, base...)
	if err != nil {
		return nil, fmt.Errorf("subagent %q: WithReactOptions: %w", name, err)
	}
	t.probe = probe
	configured := probe.SystemPrompt()
	shape := ""
	if t.cfg.check != nil && !t.cfg.contextForks {
		shape = t.cfg.check.prompt
	}
	// A context fork sends its parent's system prompt: the shape goes
	// with every call's task, and the prompts before it when it forks.
	t.shapeTold = !t.cfg.contextForks
	if t.cfg.contextForks {
		t.forkTask = func(args json.RawMessage) string { return joinPrompts(configured, field(args, "system_prompt")) }
	}
	base = slices.Clip(base)
	t.factory = func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		// A field of the wrong type degrades to empty.
		own := field(args, "system_prompt")
		// The configured prompt, the model's own and the answer's shape,
		// each when there is one; the prompt comes last among the options,
		// so that it is the one that holds.
		system := joinPrompts(configured, own, shape)
		return agent.NewReact(p, append(base, agent.WithSystemPrompt(system))...)
	}
	return t, nil
}

// defaultToTask makes a tool with the default parameters (TaskParams) and
// no WithInputFromArgs hand its child the task's text, as a person would put the
// question, not the arguments' JSON; a tool with parameters of its own
// hands over their JSON text, which it alone knows how to read.
func (t *SubAgentTool) defaultToTask() {
	if t.cfg.params == nil && t.cfg.input == nil {
		t.cfg.input = taskInput
	}
}

// joinPrompts joins the non-empty parts with a blank line.
func joinPrompts(parts ...string) string {
	var kept []string
	for _, s := range parts {
		if s != "" {
			kept = append(kept, s)
		}
	}
	return strings.Join(kept, "\n\n")
}

// taskInput hands the child the task field of the arguments, given as
// text too. A missing, non-string or blank task is an error: the child
// would otherwise send an empty user message, which model APIs reject.
func taskInput(_ json.RawMessage, text string) (agent.Input, error) {
	return readTask(text, taskKeys)
}

// reactInput is taskInput for FromReact, whose arguments also hold a
// system_prompt.
func reactInput(_ json.RawMessage, text string) (agent.Input, error) {
	return readTask(text, reactKeys)
}

// paramsTaskInput is taskInput for FromReact with parameters of the
// user's (WithParams), whose schema says which keys there are: "task" is
// read by its exact name, and another spelling is another key.
func paramsTaskInput(_ json.RawMessage, text string) (agent.Input, error) {
	return readTask(text, nil)
}

// The default arguments' keys (TaskParams, ReactParams): the schemas
// leave other keys open, but one that differs from these only in case is
// refused, so that a model that sent both learns which one the child
// reads, by its exact name, as a policy or a viewer does.
var (
	taskKeys = reflect.TypeFor[struct {
		Task string `json:"task"`
	}]()
	reactKeys = reflect.TypeFor[struct {
		Task         string `json:"task"`
		SystemPrompt string `json:"system_prompt"`
	}]()
)

func readTask(text string, keys reflect.Type) (agent.Input, error) {
	if keys != nil {
		if err := exactkeys.Check(text, keys); err != nil {
			return agent.Input{}, err
		}
	}
	task, _ := jsonvalue.Member(text, "task") // as field reads it, from the text the call read already
	if strings.TrimSpace(task) == "" {
		return agent.Input{}, errors.New(`"task" is missing or empty: pass the sub-agent's task as a non-empty string`)
	}
	return agent.Input{Text: task}, nil
}

// field returns the string member name of the JSON object args, read by its
// exact name: the value the parameter schema checked, and no other. A
// missing member, one that is not a string, or one repeated (which Call
// refuses before) is empty.
func field(args json.RawMessage, name string) string {
	s, _ := jsonvalue.Member(string(args), name)
	return s
}

// taskParams and reactParams are the default parameter schemas, compiled
// once for all the tools that take them: compiling checks a schema against
// the meta-schema, which was most of what building a tool cost (100 tools
// loaded from files: BenchmarkLoad in package agentfile).
var (
	taskParams  = sync.OnceValues(func() (*jsonschema.Schema, error) { return jsonschema.Compile(json.RawMessage(TaskParams)) })
	reactParams = sync.OnceValues(func() (*jsonschema.Schema, error) { return jsonschema.Compile(json.RawMessage(ReactParams)) })
)

func build(name, description string, defaultParams func() (*jsonschema.Schema, error), f form, opts []Option) (*SubAgentTool, error) {
	if err := toolcall.CheckName(name); err != nil {
		return nil, fmt.Errorf("subagent: %w", err)
	}
	cfg := config{form: f, maxDepth: DefaultMaxDepth, maxOutput: DefaultMaxOutputBytes}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("subagent %q: %w", name, err)
		}
	}
	var schema *jsonschema.Schema
	var err error
	if cfg.params == nil {
		schema, err = defaultParams()
	} else {
		schema, err = jsonschema.Compile(cfg.params)
	}
	if err != nil {
		return nil, fmt.Errorf("subagent %q: parameters: %w", name, err)
	}
	return &SubAgentTool{
		def:    tool.Definition{Name: name, Description: description, Parameters: schema.Raw()},
		params: schema,
		cfg:    cfg,
	}, nil
}

// Definition returns the tool's name, description and parameter schema.
func (t *SubAgentTool) Definition() tool.Definition { return t.def }

// Available reports whether ctx is within the depth cap.
func (t *SubAgentTool) Available(ctx context.Context) bool {
	return agent.Depth(ctx) < t.cfg.maxDepth
}

type config struct {
	form       form            // the constructor the options are given to
	params     json.RawMessage // WithParams
	maxDepth   int
	maxOutput  int
	timeout    time.Duration
	refuseBusy bool
	input      func(args json.RawMessage, text string) (agent.Input, error) // text: args as a string
	render     func(ctx context.Context, o Outcome) (string, error)
	onOutcome  func(ctx context.Context, o Outcome)
	check      *checker
	guards     *guardrail.Set // WithGuardrails; nil: none
	reactOpts  []agent.Option
	durable    *durable // WithStore
	maxScopes  int      // WithMaxScopes
	// contextForks: a child starts from its parent's conversation
	// (WithContextForks); for the spawn tool, unless the call asks for a
	// fresh one.
	contextForks bool
}

// form is a constructor that takes options: one of the three forms of a
// SubAgentTool, or the spawn tool. The values are bits, so that a set of
// forms is their sum.
type form uint8

const (
	formAgent form = 1 << iota
	formFactory
	formReact
	formSpawn
	formScoped
)

func (f form) String() string {
	switch f {
	case formAgent:
		return "FromAgent"
	case formFactory:
		return "FromFactory"
	case formReact:
		return "FromReact"
	case formSpawn:
		return "NewSpawner"
	case formScoped:
		return "FromScoped"
	}
	return "an unknown constructor"
}

// usedBy returns an option that only the forms in forms use. Given to
// another form, it fails with what (a sentence naming the option and what
// it configures) followed by the form that would ignore it.
func usedBy(forms form, what string, set func(*config) error) Option {
	return func(c *config) error {
		if c.form&forms == 0 {
			return fmt.Errorf("%s; %s would ignore it", what, c.form)
		}
		return set(c)
	}
}

// Option configures every form and the spawn tool.
type Option func(*config) error

// applySpawn makes every Option a SpawnOption: it configures the spawn
// tool's shared settings.
func (o Option) applySpawn(c *spawnConfig) error {
	if o == nil {
		return nil
	}
	return o(&c.config)
}

// WithParams sets the arguments' JSON Schema (NewSpawner refuses it).
func WithParams(schema json.RawMessage) Option {
	return usedBy(formAgent|formScoped|formFactory|formReact,
		"WithParams sets a SubAgentTool's parameters (the spawn tool's are fixed)",
		func(c *config) error { c.params = schema; return nil })
}

// WithMaxDepth sets the depth at which the tool disappears (DefaultMaxDepth).
func WithMaxDepth(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("max depth %d: use 1 or more (1 lets only the top-level agent delegate)", n)
		}
		c.maxDepth = n
		return nil
	}
}

// WithMaxOutputBytes caps a child's answer (DefaultMaxOutputBytes).
func WithMaxOutputBytes(n int) Option {
	return func(c *config) error {
		if n < 64 {
			return fmt.Errorf("max output %d bytes: use at least 64", n)
		}
		c.maxOutput = n
		return nil
	}
}

// WithTimeout bounds each call; past it the call fails with ErrTimeout.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("timeout %v: use a positive duration", d)
		}
		c.timeout = d
		return nil
	}
}

// WithRefuseWhenBusy makes a busy FromAgent tool fail with ErrBusy.
func WithRefuseWhenBusy() Option {
	return usedBy(formAgent|formScoped, "WithRefuseWhenBusy applies to a FromAgent expert, whose calls take turns",
		func(c *config) error { c.refuseBusy = true; return nil })
}

// WithInputFromArgs maps the arguments to the child's input.
func WithInputFromArgs(fn func(args json.RawMessage) (agent.Input, error)) Option {
	return usedBy(formAgent|formScoped|formFactory|formReact,
		"WithInputFromArgs maps the arguments of a FromAgent, FromFactory or FromReact call (a spawned child's input is the spawn call's task and context; give WithInputFromArgs to a roster member instead)",
		func(c *config) error {
			if fn == nil {
				return errors.New("WithInputFromArgs(nil): pass a function")
			}
			c.input = func(args json.RawMessage, _ string) (agent.Input, error) { return fn(args) }
			return nil
		})
}

// Outcome is what a call produced, for WithRender.
type Outcome struct {
	RunID     string
	Arguments json.RawMessage       // {} for none
	Output    agent.Output          // the child's last run
	Usage     provider.Usage        // all its runs
	Models    []provider.ModelUsage // the same per model
	Value     any                   // the checked answer: a Report, a T, JSON; nil if unfit
	Content   string                // the result text without WithRender, uncapped
}

// WithRender makes the result text from the call's Outcome.
func WithRender(fn func(ctx context.Context, o Outcome) (string, error)) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("WithRender(nil): pass a function")
		}
		c.render = fn
		return nil
	}
}

// WithOutcome calls fn, maybe concurrently, with each call's Outcome.
func WithOutcome(fn func(ctx context.Context, o Outcome)) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("WithOutcome(nil): pass a function")
		}
		c.onOutcome = fn
		return nil
	}
}

// WithReactOptions configures FromReact's children and the spawn tool's forks.
func WithReactOptions(opts ...agent.Option) Option {
	return usedBy(formReact|formSpawn,
		"WithReactOptions configures the children of FromReact and the spawn tool's forks",
		func(c *config) error {
			c.reactOpts = append(c.reactOpts, opts...)
			return nil
		})
}
