package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/answercheck"
	"github.com/deputy-go/deputy/internal/exactkeys"
	"github.com/deputy-go/deputy/internal/jobtool"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/internal/subcode"
	"github.com/deputy-go/deputy/internal/textcap"
	"github.com/deputy-go/deputy/internal/toolcall"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

// Defaults of a SubAgentTool and of the spawn tool (docs/fanout.md).
const (
	DefaultMaxDepth         = 1                                                                                                                                                                                                                                         // a top-level agent delegates, its children do not
	DefaultMaxOutputBytes   = 48 << 10                                                                                                                                                                                                                                  // what a child returns to its parent
	DefaultMaxScopes        = 1024                                                                                                                                                                                                                                      // the scopes a FromScoped tool keeps in memory
	SpawnToolName           = "spawn_subagent"                                                                                                                                                                                                                          // the name the model calls it by
	DefaultMaxSpawns        = 8                                                                                                                                                                                                                                         // children one parent run may start
	DefaultSpawnConcurrency = 0                                                                                                                                                                                                                                         // children of one run running at once
	DefaultForkName         = "subagent"                                                                                                                                                                                                                                // a forked child's agent name
	DefaultForkPrompt       = "You are a sub-agent doing one bounded task for another agent. Work only on that task, with the tools you have, and reply with the result. Say plainly what you could not do: a partial answer presented as complete is worse than none." // a forked child's system prompt
)

// Spawner is the spawn_subagent tool (docs/fanout.md).
type Spawner struct {
	def    tool.Definition
	params *jsonschema.Schema
	p      provider.Provider
	tools  *tool.Registry
	cfg    spawnConfig
	roster map[string]*SubAgentTool
	fork   *SubAgentTool      // template of a forked child; factory set per call
	jobsIn *jsonschema.Schema // parameters of the jobs tool

	forkOnce sync.Once
	forkReg  *tool.Registry
	// forkOpts are the options every fork is built with, made once (see
	// forkFor), clipped so that what a call adds goes to a copy.
	forkOpts []agent.Option
	// probe is a fork as WithReactOptions builds it (nil without them),
	// which an agent given the tool checks for a policy wider than its
	// own (delegatesOf).
	probe *agent.React

	threads threadJobs // the jobs that outlive their run (WithJobsAcrossTurns)
}

// NewSpawner returns the spawn tool of an agent on p with reg.
func NewSpawner(p provider.Provider, reg *tool.Registry, opts ...SpawnOption) (*Spawner, error) {
	if p == nil {
		return nil, fmt.Errorf("subagent %s: nil provider: pass the provider the parent runs on", SpawnToolName)
	}
	cfg := spawnConfig{
		config:    config{form: formSpawn, maxDepth: DefaultMaxDepth, maxOutput: DefaultMaxOutputBytes},
		maxSpawns: DefaultMaxSpawns, concurrency: DefaultSpawnConcurrency, maxBackground: DefaultMaxBackground, maxOwnerJobs: DefaultMaxOwnerJobs,
		forkName: DefaultForkName, forkPrompt: DefaultForkPrompt, jobTTL: DefaultJobTTL, now: time.Now,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applySpawn(&cfg); err != nil {
			return nil, fmt.Errorf("subagent %s: %w", SpawnToolName, err)
		}
	}
	if (cfg.jobStore != nil || cfg.jobTTL != DefaultJobTTL) && !cfg.acrossTurns {
		return nil, fmt.Errorf("subagent %s: WithJobStore and WithJobTTL keep the jobs that outlive their turn: add WithJobsAcrossTurns", SpawnToolName)
	}
	if err := resolveMenu(&cfg, p); err != nil {
		return nil, fmt.Errorf("subagent %s: %w", SpawnToolName, err)
	}
	s := &Spawner{p: p, tools: reg, cfg: cfg, roster: map[string]*SubAgentTool{}}
	names := make([]string, 0, len(cfg.roster))
	for _, m := range cfg.roster {
		n := m.def.Name
		if _, dup := s.roster[n]; dup {
			return nil, fmt.Errorf("subagent %s: two roster members are named %q: give each its own name", SpawnToolName, n)
		}
		if err := m.params.Validate([]byte(`{"task":"t"}`)); err != nil {
			return nil, fmt.Errorf("subagent %s: roster member %q does not accept a call with only a task (%v): give it parameters such as TaskParams", SpawnToolName, n, err)
		}
		s.roster[n] = m
		names = append(names, n)
	}
	params, err := jsonschema.Compile(spawnParams(names, &cfg))
	if err != nil {
		return nil, err
	}
	s.params = params
	if s.jobsIn, err = jsonschema.Compile(json.RawMessage(jobtool.Params)); err != nil {
		return nil, err
	}
	s.def = tool.Definition{Name: SpawnToolName, Description: spawnDescription(cfg), Parameters: params.Raw()}
	s.fork = &SubAgentTool{def: tool.Definition{Name: cfg.forkName, Description: "a fork of the calling agent"}, cfg: cfg.config}
	if len(cfg.reactOpts) > 0 {
		reg := s.tools
		if cfg.forkTools != nil {
			reg = reg.Filter(cfg.forkTools)
		}
		opts := append(slices.Clip(cfg.reactOpts), agent.WithName(cfg.forkName), agent.WithSystemPrompt(cfg.forkPrompt), agent.WithRegistry(reg))
		if s.probe, err = agent.NewReact(p, opts...); err != nil {
			return nil, fmt.Errorf("subagent %s: WithReactOptions: %w", SpawnToolName, err)
		}
	}
	return s, nil
}

// SpawnOption configures NewSpawner; every Option is one.
type SpawnOption interface {
	applySpawn(*spawnConfig) error
}

// spawnConfig is the spawn tool's configuration: what it shares with a
// SubAgentTool (the template of its forks), and its own settings.
type spawnConfig struct {
	config
	roster      []*SubAgentTool
	maxSpawns   int
	concurrency int
	childTokens int64
	childSteps  int
	childTime   time.Duration
	forkName    string
	forkPrompt  string
	forkTools   func(tool.Tool) bool
	policy      func(ctx context.Context) bool
	background  bool
	// maxBackground bounds the background jobs alive at once in one run.
	maxBackground int
	// acrossTurns: a top-level run's jobs belong to its thread
	// (WithJobsAcrossTurns); note renders what its next run is told of one.
	acrossTurns bool
	note        func(JobResult) string
	// jobLimits bound each background job (WithJobLimits); maxOwnerJobs
	// the jobs alive in one owner's threads (WithMaxOwnerJobs).
	jobLimits    JobLimits
	maxOwnerJobs int
	// jobStore keeps threads' jobs (WithJobStore); jobTTL is how long a
	// thread's jobs outlive its last use (WithJobTTL); now is the clock
	// the sweep reads (time.Now; a test's own).
	jobStore *store.Store
	jobTTL   time.Duration
	now      func() time.Time
	// menu is the models a fork may run on (WithModelMenu), priced from
	// menuPrices; defaultModel is the one a spawn that names none runs on
	// (WithDefaultModel; "": the spawner's provider, as without a menu).
	menu         []menuModel
	menuPrices   *provider.Prices
	defaultModel string
}

// spawnOption is a SpawnOption of the spawn tool alone.
type spawnOption func(*spawnConfig) error

func (o spawnOption) applySpawn(c *spawnConfig) error { return o(c) }

// WithRoster offers named children, given the task as their "task" argument.
func WithRoster(members ...*SubAgentTool) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		for _, m := range members {
			if m == nil {
				return errors.New("WithRoster: nil member")
			}
		}
		c.roster = append(c.roster, members...)
		return nil
	})
}

// WithMaxSpawns bounds the children one parent run may start (ErrMaxSpawns).
func WithMaxSpawns(n int) SpawnOption {
	// A spawn the policy refuses starts none and is not counted
	// (docs/fanout.md).
	return spawnOption(func(c *spawnConfig) error {
		if n < 1 {
			return fmt.Errorf("max spawns %d: use 1 or more, or leave the spawn tool out", n)
		}
		c.maxSpawns = n
		return nil
	})
}

// WithSpawnConcurrency bounds one run's children running at once (0: none).
func WithSpawnConcurrency(n int) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		if n < 1 {
			return fmt.Errorf("spawn concurrency %d: use 1 or more", n)
		}
		c.concurrency = n
		return nil
	})
}

// WithChildTokenBudget gives each fork at most n tokens (ErrNoBudget).
func WithChildTokenBudget(n int64) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		if n < 1 {
			return fmt.Errorf("child token budget %d: use 1 or more", n)
		}
		c.childTokens = n
		return nil
	})
}

// WithChildMaxSteps bounds each fork's model calls (agent.WithMaxSteps).
func WithChildMaxSteps(n int) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		if n < 1 {
			return fmt.Errorf("child max steps %d: use 1 or more", n)
		}
		c.childSteps = n
		return nil
	})
}

// WithChildTimeout bounds each forked child's call as WithTimeout does.
func WithChildTimeout(d time.Duration) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		if d <= 0 {
			return fmt.Errorf("child timeout %v: use a positive duration", d)
		}
		c.childTime = d
		return nil
	})
}

// WithForkPrompt sets forks' system prompt (default DefaultForkPrompt).
func WithForkPrompt(prompt string) SpawnOption {
	return spawnOption(func(c *spawnConfig) error { c.forkPrompt = prompt; return nil })
}

// WithForkName sets forks' agent name (default DefaultForkName).
func WithForkName(name string) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		if err := toolcall.CheckName(name); err != nil {
			return err
		}
		c.forkName = name
		return nil
	})
}

// WithForkTools gives forks only the parent's tools that keep accepts.
func WithForkTools(keep func(tool.Tool) bool) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		if keep == nil {
			return errors.New("WithForkTools(nil): pass a function")
		}
		c.forkTools = keep
		return nil
	})
}

// WithSpawnPolicy offers the tool only where allow(ctx) is true.
func WithSpawnPolicy(allow func(ctx context.Context) bool) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		if allow == nil {
			return errors.New("WithSpawnPolicy(nil): pass a function")
		}
		c.policy = allow
		return nil
	})
}

// WithContextForks makes children context forks (docs/cost.md).
func WithContextForks() Option {
	return usedBy(formSpawn|formFactory|formReact,
		"WithContextForks makes children context forks of their parent's conversation, which only a child built afresh for each call can start from (a resident expert keeps a conversation of its own): use FromFactory or FromReact",
		func(c *config) error { c.contextForks = true; return nil })
}

// WithBackground lets the model start children as jobs (docs/background.md).
func WithBackground() SpawnOption {
	return spawnOption(func(c *spawnConfig) error { c.background = true; return nil })
}

// WithMaxBackground bounds a run's jobs alive at once (ErrMaxBackground).
func WithMaxBackground(n int) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		if n < 1 {
			return fmt.Errorf("max background %d: use 1 or more", n)
		}
		c.maxBackground = n
		return nil
	})
}

func spawnParams(roster []string, c *spawnConfig) json.RawMessage {
	props := map[string]any{
		"task":    map[string]any{"type": "string", "minLength": 1, "description": "What the sub-agent must do: one bounded task, with what counts as done."},
		"context": map[string]any{"type": "string", "description": "Everything the sub-agent needs to know from this conversation: it sees nothing else."},
		"output_schema": map[string]any{"type": "object",
			"description": "Optional JSON Schema of the answer you want back; the answer is validated against it."},
	}
	if len(roster) > 0 {
		props["agent"] = map[string]any{"type": "string", "enum": roster,
			"description": "Optional: the named sub-agent to use. Leave it out to fork yourself."}
	}
	if len(c.menu) > 0 {
		names := make([]string, len(c.menu))
		for i, m := range c.menu {
			names[i] = m.Name
		}
		props["model"] = map[string]any{"type": "string", "enum": names,
			"description": "Optional: the model the sub-agent runs on, by what it costs: " + c.menuText() + ". Pick the cheapest that can do the task well."}
	}
	if c.contextForks {
		props["inherit_context"] = map[string]any{"type": "boolean",
			"description": "Default true: the sub-agent starts from this whole conversation (read from the prompt cache, so cheap when several share it) and needs no `context`. Set false for a small task that does not need it: a fresh sub-agent reads only its task."}
	}
	if c.background {
		props["background"] = map[string]any{"type": "boolean",
			"description": "Start the sub-agent in the background and get a job id at once."}
	}
	b, _ := json.Marshal(map[string]any{"type": "object", "properties": props, "required": []string{"task"}, "additionalProperties": false})
	return b
}

func spawnDescription(c spawnConfig) string {
	var b strings.Builder
	b.WriteString("Start a sub-agent on a bounded task. It works in a fresh context of its own and returns only its final answer.\n")
	b.WriteString("How to use it well:\n")
	b.WriteString("- Handle simple work directly; delegate a task when it is bounded and self-contained, or when several can run side by side (spawns in one turn run in parallel).\n")
	b.WriteString("- Give each sub-agent what it needs in `context`: it cannot see this conversation.\n")
	b.WriteString("- Check every answer: a partial or failed sub-agent is not success. Redo, work around, or report what is missing.\n")
	b.WriteString("- Ask for a shape with `output_schema` when you need structured data back.\n")
	fmt.Fprintf(&b, "- At most %d sub-agents per run.\n", c.maxSpawns)
	if len(c.roster) > 0 {
		b.WriteString("Named sub-agents (pick with `agent` only when its purpose covers the task; leave `agent` out to fork yourself):\n")
		for _, m := range c.roster {
			fmt.Fprintf(&b, "- %s: %s\n", m.def.Name, m.def.Description)
		}
	} else {
		b.WriteString("Each sub-agent is a fork of you, with your tools.\n")
	}
	if len(c.menu) > 0 {
		b.WriteString("Choose the model a fork runs on with `model`: " + c.menuText() + ".\n")
	}
	if c.contextForks {
		b.WriteString("A fork starts from this conversation as you see it (inherit_context, on by default): give it only its task. Forks of one turn share that context from the prompt cache.\n")
	}
	if c.background {
		b.WriteString("With background=true you get a job id at once. A job id is not a result: collect each job with " + JobsToolName +
			" (wait), or cancel it, before you answer; jobs still running when you answer are cancelled.\n")
	}
	return b.String()
}

// Definition returns the spawn tool's definition.
func (s *Spawner) Definition() tool.Definition { return s.def }

// Available reports whether spawning is offered under ctx.
func (s *Spawner) Available(ctx context.Context) bool {
	return agent.Depth(ctx) < s.cfg.maxDepth && (s.cfg.policy == nil || s.cfg.policy(ctx))
}

type spawnArgs struct {
	Task         string          `json:"task"`
	Context      string          `json:"context"`
	Agent        string          `json:"agent"`
	OutputSchema json.RawMessage `json:"output_schema"`
	Background   bool            `json:"background"`
	// InheritContext is the call's choice of a context fork; nil leaves
	// it to WithContextForks.
	InheritContext *bool `json:"inherit_context"`
	// Model is the menu's model the fork runs on (WithModelMenu); ""
	// leaves it to WithDefaultModel.
	Model string `json:"model"`
}

// spawnArgsType is what the spawn tool's arguments decode into: a key
// the schema does not name but encoding/json would read into a field by
// ignoring case is refused (exactkeys).
var spawnArgsType = reflect.TypeFor[spawnArgs]()

// task returns the arguments as a Task, to keep with a stored job.
func (a spawnArgs) task() json.RawMessage {
	b, _ := json.Marshal(Task{Task: a.Task, Context: a.Context, Agent: a.Agent, OutputSchema: a.OutputSchema, Model: a.Model}) // plain fields: it cannot fail
	return b
}

// spawnRun is the spawner's state for one parent run: its count of spawns
// and the slots its children run in.
type spawnRun struct {
	spawns atomic.Int64
	slots  *semaphore.Weighted
}

func (s *Spawner) state(ctx context.Context) *spawnRun {
	return run.Local(ctx, s, func() any {
		n := int64(s.cfg.concurrency)
		if n == 0 {
			n = math.MaxInt64 // no bound
		}
		return &spawnRun{slots: semaphore.NewWeighted(n)}
	}).(*spawnRun)
}

// RunsAgain reports whether call starts a job (tool.Rerunner).
func (s *Spawner) RunsAgain(call tool.Call) bool {
	var a struct {
		Background bool `json:"background"`
	}
	return s.cfg.background && exactkeys.Unmarshal(string(toolcall.Arguments(call.Arguments)), &a) == nil && a.Background
}

// Replayed counts a spawn replayed that started a child (tool.Replayer).
func (s *Spawner) Replayed(ctx context.Context, _ tool.Call) {
	js := journalFrom(ctx)
	if js == nil {
		return
	}
	// A child that ran recorded its model's answers in the call's part of
	// the journal; a refused spawn recorded none.
	for _, k := range js.J.Keys(js.Prefix) {
		if journal.IsAnswer(k) {
			s.state(ctx).spawns.Add(1)
			return
		}
	}
}

// Call starts a child and returns its answer, or a background job's id.
func (s *Spawner) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	if err := s.admit(ctx); err != nil {
		return tool.Result{}, err
	}
	a, err := s.parse(call.Arguments)
	if err != nil {
		return tool.Result{}, err
	}
	check, callSchema, err := s.checkerFor(a.OutputSchema)
	if err != nil {
		return tool.Result{}, err
	}
	sc, err := s.plan(ctx, call.ID, a, check, callSchema)
	if err != nil {
		return tool.Result{}, err
	}
	if a.Background {
		if js := journalFrom(ctx); js != nil && !js.Recorded {
			// What the job pays for is kept, when it stops unfinished, in
			// the scope of this call: a run of the turn that does not get
			// as far as starting the job again counts it from there.
			sc.spentKey = js.Prefix + "spent"
		}
		j, err := s.startJob(ctx, sc, call.ID, a)
		if err != nil {
			return tool.Result{}, err
		}
		return j.receipt(), nil
	}
	return sc.runNow(ctx)
}

// admit refuses a spawn at the depth cap, or where the policy denies it.
func (s *Spawner) admit(ctx context.Context) error {
	if depth := agent.Depth(ctx); depth >= s.cfg.maxDepth {
		return tool.Correctable(fmt.Errorf("%w: %s cannot be called at depth %d (the cap is %d): do this work directly",
			ErrMaxDepth, SpawnToolName, depth, s.cfg.maxDepth))
	}
	if s.cfg.policy != nil && !s.cfg.policy(ctx) {
		return tool.Correctable(fmt.Errorf("%w: do this work directly", ErrDenied))
	}
	return nil
}

// parse checks the call's arguments against the tool's schema and decodes
// them.
func (s *Spawner) parse(arguments json.RawMessage) (spawnArgs, error) {
	raw := toolcall.Arguments(arguments)
	text := string(raw) // once, for the schema and the keys
	if err := s.params.ValidateText(context.Background(), text); err != nil {
		if merr := s.badModel(raw); merr != nil {
			return spawnArgs{}, merr // the model is what is wrong: say so, with the choices
		}
		return spawnArgs{}, fmt.Errorf("%w for %s: %v: %s", tool.ErrInvalidArguments, SpawnToolName, err, s.allowed())
	}
	if err := exactkeys.Check(text, spawnArgsType); err != nil {
		return spawnArgs{}, fmt.Errorf("%w for %s: %v: %s", tool.ErrInvalidArguments, SpawnToolName, err, s.allowed())
	}
	var a spawnArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return spawnArgs{}, fmt.Errorf("%w for %s: %v", tool.ErrInvalidArguments, SpawnToolName, err)
	}
	if strings.TrimSpace(a.Task) == "" {
		return spawnArgs{}, fmt.Errorf("%w for %s: task is blank: say what the sub-agent must do", tool.ErrInvalidArguments, SpawnToolName)
	}
	return a, nil
}

// checkerFor returns the checker of the child's answer: one for the
// call's output_schema (callSchema), else the spawner's default, if any.
func (s *Spawner) checkerFor(schema json.RawMessage) (check *checker, callSchema bool, err error) {
	if len(schema) == 0 || string(schema) == "null" {
		return s.cfg.check, false, nil
	}
	// The schema is the model's: bounded, so that neither compiling it nor
	// checking the child's answer against it can run away.
	sch, err := jsonschema.CompileUntrusted(schema)
	if err != nil {
		return nil, false, fmt.Errorf("%w for %s: output_schema: %v: send a JSON Schema object such as {\"type\":\"object\",\"properties\":{\"answer\":{\"type\":\"string\"}}}, or leave it out",
			tool.ErrInvalidArguments, SpawnToolName, err)
	}
	return &checker{schema: sch, decode: answercheck.DecodeAny, prompt: SchemaPrompt(sch.Raw())}, true, nil
}

// spawnCall is one accepted call of the spawn tool: the child it starts
// and the parent run's state it counts against.
type spawnCall struct {
	s      *Spawner
	st     *spawnRun
	callID string
	member *target // a roster member set up for the call; nil for a fork
	// A fork's task and checker: it is set up once it has a slot.
	text  string
	check *checker
	// spentKey: see opening.spentKey ("" for a child in the foreground).
	spentKey string
	// prefix is the parent's request a context fork starts from; nil for
	// a fresh fork.
	prefix *provider.Request
	// model is the menu's model a fork runs on (WithModelMenu), and fork
	// the spawner's fork set to run on it; nil: the spawner's provider.
	model *menuModel
	fork  *SubAgentTool
	// limits bound the call's child when it runs as a background job,
	// and bounds say which of them are its own.
	limits JobLimits
	bounds jobBounds
	// handed is the input of a job's child as the policy let it through
	// before the job started (handOffFirst); nil: not checked yet.
	handed *agent.Input
	// carried: a job started again (after a restart, or woken with its
	// answers) that the run it started in counted, not this one.
	carried bool
	// announced is where the relay's queue stood once a job of the call
	// was announced, before it started: what startJob flushes.
	announced relayMark
}

// target is a sub-agent set up for one call: the tool that runs it, and
// the arguments and input it gets.
type target struct {
	t    *SubAgentTool
	args json.RawMessage
	in   agent.Input
}

// plan accepts a call: it sets up the roster member it names, or, for a
// fork, makes sure the parent run has tokens left; then it counts the
// spawn against the run's limit.
func (s *Spawner) plan(ctx context.Context, callID string, a spawnArgs, check *checker, callSchema bool) (*spawnCall, error) {
	m, err := s.pickModel(a)
	if err != nil {
		return nil, err
	}
	sc := &spawnCall{s: s, callID: callID, text: a.Task, check: check, fork: s.fork}
	if m != nil {
		f := *s.fork
		f.model = m.id
		sc.model, sc.fork = m, &f
	}
	if strings.TrimSpace(a.Context) != "" {
		sc.text += "\n\nContext:\n" + a.Context
	}
	if a.Agent != "" {
		m, args, in, err := s.member(a.Agent, sc.text, check, callSchema)
		if err != nil {
			return nil, err
		}
		if m.cfg.contextForks {
			in = m.forkInput(ctx, args, in)
		}
		sc.member = &target{t: m, args: args, in: in}
	} else if left, limited := run.CostLeft(ctx); limited && left <= 0 && !run.CostShared(ctx) {
		return nil, refuse(ctx, callID, sc.fork.def.Name, "no_budget", errNoBudget())
	} else if left, limited := run.TokensLeft(ctx); limited && left == 0 && !run.HasShares(ctx) {
		// (With shares set aside, what is left is in them: child says
		// whether this call's is empty.)
		return nil, refuse(ctx, callID, sc.fork.def.Name, "no_budget", errNoBudget())
	}
	if sc.member == nil && s.cfg.contextForks && (a.InheritContext == nil || *a.InheritContext) {
		sc.prefix = run.Prefix(ctx) // nil outside a ReAct run's step: a fresh fork
	}
	sc.st = s.state(ctx)
	if n := sc.st.spawns.Add(1); n > int64(s.cfg.maxSpawns) {
		return nil, refuse(ctx, callID, sc.who().def.Name, "max_spawns", tool.Correctable(fmt.Errorf("%w: this run has started its %d sub-agents: do the rest directly, or combine tasks",
			ErrMaxSpawns, s.cfg.maxSpawns)))
	}
	return sc, nil
}

// refuse reports the sub-agent name that a limit refused, as an event and
// in the run's count, and returns err, the error the model reads.
func refuse(ctx context.Context, callID, name, reason string, err error) error {
	run.Count(ctx, run.Refused)
	if em := event.From(ctx); em.Enabled() {
		v, _ := json.Marshal(map[string]string{"reason": reason, "toolCallId": callID, "name": name, "message": err.Error()})
		em.Emit(event.Event{Type: event.Custom, Name: RefusedEvent, Value: v})
	}
	return err
}

// who is the sub-agent the call runs, as a job names it: the member, or
// the spawner's fork.
func (sc *spawnCall) who() *SubAgentTool {
	if sc.member != nil {
		return sc.member.t
	}
	return sc.fork
}

// runNow runs the child in the foreground, in a slot of the parent run. A
// fork's reservation ends, with what the child spent, before the slot is
// given up, so that the next child sees it.
func (sc *spawnCall) runNow(ctx context.Context) (tool.Result, error) {
	if err := sc.takeSlot(ctx); err != nil {
		return tool.Result{}, err
	}
	defer sc.st.slots.Release(1)
	c, settle, err := sc.child(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	res, err := sc.invoke(ctx, c, opening{unstarted: sc.uncount})
	settle(res.Usage.Tokens())
	return res, err
}

// runJob runs the child as a background job, in a slot of the parent run
// like runNow; a fork's reservation is kept until the job's usage reaches
// the parent, which calls the settle function it returns. ahead is the
// job's SUBAGENT_STARTED, emitted before its receipt.
//
// Under a journal, a job whose child finished in an earlier run of the
// turn is answered from the journal at once, needing no slot and no
// budget; and one that cannot start (its run ended first, or no budget is
// left) still counts what the runs before paid for it, as spent before.
func (sc *spawnCall) runJob(ctx context.Context, ahead *announced) (tool.Result, func(int64), error) {
	key, paid, finished := sc.recorded(ctx)
	if finished {
		res, err := sc.invoke(ctx, target{t: sc.who(), args: sc.args(), in: sc.input()}, opening{ahead: ahead})
		return res, noSettle, err
	}
	if err := sc.takeSlot(ctx); err != nil {
		return sc.unstarted(ctx, key, paid, ahead, err)
	}
	defer sc.st.slots.Release(1)
	c, settle, err := sc.child(ctx)
	if err != nil {
		return sc.unstarted(ctx, key, paid, ahead, err)
	}
	op := opening{ahead: ahead, spentKey: sc.spentKey, unstarted: sc.uncount}
	if sc.handed != nil {
		c.in, op.handed = *sc.handed, true
	}
	res, err := sc.invoke(ctx, c, op)
	return res, settle, err
}

// uncount takes back the call's count against WithMaxSpawns: it started
// no child (the policy refused its hand-off, as a call the policy refuses
// before it reaches the tool is not counted, or no budget was left). A
// carried job was never counted by this run.
func (sc *spawnCall) uncount() {
	if !sc.carried {
		sc.st.spawns.Add(-1)
	}
}

// takeSlot waits for a free slot of the parent run.
func (sc *spawnCall) takeSlot(ctx context.Context) error {
	if err := sc.st.slots.Acquire(ctx, 1); err != nil {
		return fmt.Errorf("subagent %s: waiting for a free slot: %w", SpawnToolName, err)
	}
	return nil
}

// invoke runs the child c, its slot held, and returns its result, capped.
func (sc *spawnCall) invoke(ctx context.Context, c target, op opening) (tool.Result, error) {
	res, err := c.t.invoke(ctx, sc.callID, c.args, c.in, op)
	res.Content = textcap.Cap(res.Content, sc.s.cfg.maxOutput)
	return res, err
}

// args and input are the arguments and input of the call's child, as a
// member or a fork gets them (a fork's do not depend on its budget).
func (sc *spawnCall) args() json.RawMessage {
	if sc.member != nil {
		return sc.member.args
	}
	return forkArgs(sc.text, sc.model)
}

func (sc *spawnCall) input() agent.Input {
	if sc.member != nil {
		return sc.member.in
	}
	return agent.Input{Text: sc.text}
}

// recorded looks up, for a job under a journal that it records itself
// (not a call the loop records), the journal key of the job's invocation
// and what the turn's journal holds of it: whether it finished in an
// earlier run, and what the runs before paid for it (zero: nothing).
func (sc *spawnCall) recorded(ctx context.Context) (key string, paid journal.Entry, finished bool) {
	js := journalFrom(ctx)
	if js == nil || js.Recorded {
		return "", journal.Entry{}, false
	}
	key = js.Peek(sc.who().def.Name, sc.args())
	if e, ok := js.J.Lookup(key); ok {
		return key, e, true
	}
	if sc.spentKey != "" {
		paid, _ = js.PaidUnder(sc.spentKey, js.Child(key).Prefix)
	}
	return key, paid, false
}

// unstarted ends a job that could not start with err: what the runs of the
// turn before this one paid for its invocation (paid) counts, as spent
// before, in its result and on its terminal event, as a run that replayed
// it would have counted it.
func (sc *spawnCall) unstarted(ctx context.Context, key string, paid journal.Entry, ahead *announced, err error) (tool.Result, func(int64), error) {
	if key == "" || len(paid.Models) == 0 && paid.Usage.IsZero() {
		return tool.Result{}, noSettle, err
	}
	ledger.Replay(ctx, paid.Usage, paid.Models)
	if ahead != nil && !ahead.used {
		ahead.used = true
		model := ""
		if len(paid.Models) > 0 {
			model = paid.Models[0].Model
		}
		ahead.em.Emit(event.Event{Type: event.SubagentError, SubagentRunID: ahead.runID, Message: run.Scrub(ctx, err.Error()), Code: subcode.Of(err),
			Usage: ledger.Encode(paid.Models, paid.Usage, true), Model: model})
	}
	return tool.Result{Usage: paid.Usage}, noSettle, err
}

// child returns the call's sub-agent: the member, or a fork with its
// budget. A fork's budget is taken only now, with the slot held, so that
// it counts what the siblings before it spent: WithChildTokenBudget's,
// set aside from what the parent run has left (settle ends that), or else
// all that the parent run has left. When nothing is left the spawn fails
// and is not counted.
func (sc *spawnCall) child(ctx context.Context) (target, func(int64), error) {
	if sc.member != nil {
		return *sc.member, noSettle, nil
	}
	budget, limited, settle := sc.s.cfg.childTokens, false, noSettle
	share, shared, g := run.TakeShare(ctx, budget, true)
	switch {
	case shared:
		budget, limited, settle = share, true, g.Settle
	case budget > 0:
		budget, limited, g = run.Reserve(ctx, budget)
		settle = g.Settle
	default:
		budget, limited = run.TokensLeft(ctx)
	}
	if limited && budget == 0 {
		settle(0)
		sc.uncount() // nothing started
		return target{}, noSettle, refuse(ctx, sc.callID, sc.who().def.Name, "no_budget", errNoBudget())
	}
	if l := sc.limits.Tokens; l > 0 && (!limited || budget > l) {
		budget = l
		sc.bounds.tokens = true
	}
	t, args, in := sc.s.forkFor(sc.fork, sc.model, sc.text, sc.check, budget, sc.limits.Steps, sc.prefix)
	return target{t: t, args: args, in: in}, settle, nil
}

func noSettle(int64) {}

func errNoBudget() error {
	return tool.Correctable(fmt.Errorf("%w: the run's tokens are used, or set aside for the sub-agents running now: answer with what you have, or collect those first",
		ErrNoBudget))
}

// member returns the roster member name, set up for one call. Its answer
// is validated against the call's output_schema (callSchema), else the
// member's own schema, else the spawner's default; a shape that is not the
// member's own is described to it in the task.
func (s *Spawner) member(name, text string, check *checker, callSchema bool) (*SubAgentTool, json.RawMessage, agent.Input, error) {
	m, ok := s.roster[name]
	if !ok {
		return nil, nil, agent.Input{}, fmt.Errorf("%w for %s: no sub-agent named %q: %s", tool.ErrInvalidArguments, SpawnToolName, name, s.allowed())
	}
	c := *m
	if callSchema || c.cfg.check == nil && check != nil {
		c.cfg.check = check
		text += "\n\n" + check.prompt
		c.shapeTold = true
	}
	args, _ := json.Marshal(map[string]string{"task": text})
	in := agent.Input{Text: string(args)}
	if c.cfg.input != nil {
		var err error
		if in, err = c.cfg.input(args, in.Text); err != nil {
			return nil, nil, agent.Input{}, fmt.Errorf("%w for %s: %v", tool.ErrInvalidArguments, name, err)
		}
	}
	return &c, args, in, nil
}

// forkFor returns a fork of the parent, a copy of tmpl, set up for one
// call with a token limit of budget (0 for none): a context fork of
// prefix, the parent's request, when it is not nil; on the menu's model
// m, when it is not nil.
func (s *Spawner) forkFor(tmpl *SubAgentTool, m *menuModel, text string, check *checker, budget int64, steps int, prefix *provider.Request) (*SubAgentTool, json.RawMessage, agent.Input) {
	args := forkArgs(text, m)
	system := s.cfg.forkPrompt
	if check != nil && prefix == nil {
		system += "\n\n" + check.prompt
	}
	s.forkOnce.Do(func() {
		s.forkReg = s.tools
		if s.cfg.forkTools != nil {
			s.forkReg = s.tools.Filter(s.cfg.forkTools)
		}
		// The spawner's settings come last, so that WithReactOptions
		// cannot widen a fork's scope: its tools, budget and identity are
		// the spawner's. Made once, they cost a fork nothing; a call
		// appends only what is its own.
		opts := make([]agent.Option, 0, len(s.cfg.reactOpts)+3)
		opts = append(opts, s.cfg.reactOpts...)
		s.forkOpts = slices.Clip(append(opts, agent.WithName(s.cfg.forkName), agent.WithSystemPrompt(s.cfg.forkPrompt), agent.WithRegistry(s.forkReg)))
	})
	opts := s.forkOpts
	if system != s.cfg.forkPrompt {
		opts = append(opts, agent.WithSystemPrompt(system)) // after the fork's own, which it replaces
	}
	if steps == 0 {
		steps = s.cfg.childSteps
	}
	if steps > 0 {
		opts = append(opts, agent.WithMaxSteps(steps))
	}
	p := s.p
	if m != nil {
		p = m.Provider
		opts = append(opts, agent.WithModel(m.Model))
	}
	in := forkInput(m, text, check, prefix)
	c := *tmpl
	c.cfg.check = check
	if s.cfg.childTime > 0 {
		c.cfg.timeout = s.cfg.childTime
	}
	c.shapeTold = true // in the system prompt
	if budget > 0 {
		// The budget covers the whole call: a corrective retry gets what
		// the first run left of it, not a budget of its own.
		c.budget = budget
		c.limited = func(left int64) (agent.Agent, error) {
			return agent.NewReact(p, append(opts, agent.WithTokenLimit(left))...)
		}
	} else {
		c.factory = func(context.Context, json.RawMessage) (agent.Agent, error) { return agent.NewReact(p, opts...) }
	}
	return &c, args, in
}

// forkInput is what a fork of the call is given: its task, with the shape
// of its answer after it when it goes on from its parent's conversation
// (prefix; the parent's system prompt is sent as it was, so the shape goes
// with the task, after the shared prefix), and that conversation, on the
// menu's model m when one was picked.
func forkInput(m *menuModel, text string, check *checker, prefix *provider.Request) agent.Input {
	if check != nil && prefix != nil {
		text += "\n\n" + check.prompt
	}
	if m != nil && prefix != nil {
		// The fork goes on from its parent's conversation on its own
		// model (the parent's messages still shared, not copied).
		f := *prefix
		f.Model = m.Model
		prefix = &f
	}
	return agent.Input{Text: text, Fork: prefix}
}

// allowed says what the spawn tool accepts, for error messages.
func (s *Spawner) allowed() string {
	msg := "pass task (required), context, output_schema (a JSON Schema object)"
	if len(s.roster) > 0 {
		names := make([]string, 0, len(s.roster))
		for n := range s.roster {
			names = append(names, n)
		}
		sort.Strings(names)
		msg += ", agent (one of: " + strings.Join(names, ", ") + ")"
	}
	if len(s.cfg.menu) > 0 {
		msg += ", model (one of: " + s.cfg.menuNames() + ")"
	}
	if s.cfg.background {
		msg += ", background (true or false)"
	}
	return msg
}
