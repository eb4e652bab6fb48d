// Package resumetest builds the random delegation trees the resume
// property tests run, in-process and over AG-UI: their tools and models,
// what they counted, and the invariants a person relies on when a run is
// paused, crashed and resumed. It is imported by tests only.
package resumetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// How a schedule's models name their tool calls.
const (
	IDsFresh   = iota // a new id on every call of every request, as real models do
	IDsNone           // no ids at all, as some compatible servers send
	IDsRestart        // call_0, call_1, … again in every response
)

// NameCalls names one response's tool calls as a model of id mode ids
// would: fresh draws the fresh ids, shared by every response of a model.
func NameCalls(ids int, calls []provider.ToolCall, fresh *atomic.Int64) {
	for i := range calls {
		switch ids {
		case IDsFresh:
			calls[i].ID = fmt.Sprint("call_", fresh.Add(1))
		case IDsNone:
			calls[i].ID = ""
		case IDsRestart:
			calls[i].ID = fmt.Sprint("call_", i)
		}
	}
}

// A Schedule is a tree of up to three levels (lead, child, grandchild);
// each agent, in its first step, calls some tools at once — plain ones,
// ones a person must approve ("g…"), and the next level's sub-agent —
// and then answers with what they returned. With Background, the lead
// also starts a spawned child as a background job in its first step,
// waits for the job in its second and answers in its third; the job's
// child calls its own tools (Tools[Levels]).
type Schedule struct {
	Levels     int
	Tools      [][]string // by level: the tools its agent calls; then the job's
	IDs        int        // IDsFresh, IDsNone or IDsRestart
	Background bool

	// What NewTreeSchedule adds (see it); zero in NewSchedule's.
	tree bool
	// Validated: by level, the child answers in ReportSchema
	// (subagent.WithReport), its first answer rejected, so that it is run
	// once more to correct it.
	Validated []bool
	// Resident is the level (1 or more) whose sub-agent is a resident
	// expert (FromAgent) its parent calls twice in one step, or 0.
	// Compact says how it keeps its conversation short: CompactForced, its
	// model refuses the second call as too long until it is compacted;
	// CompactDue, its bound on messages makes it compact first.
	Resident int
	Compact  int
	// TokenLimit and CostLimit bound the lead (0: none).
	TokenLimit int64
	CostLimit  float64
	// RateLimited: every model call passes one provider.Admission, and
	// the model refuses some calls with a 429 and a Retry-After first.
	RateLimited bool
	// Rerun: once the turn has ended, the test re-runs a child
	// (subagent.SubAgentTool.Rerun).
	Rerun bool
}

// How a resident keeps its conversation short (Schedule.Compact).
const (
	CompactForced = 1 + iota // by its model's "too long" refusal
	CompactDue               // by its bound on messages
)

// NewSchedule draws a schedule from r; background allows a background job.
func NewSchedule(r *rand.Rand, background bool) Schedule {
	s := Schedule{Levels: 1 + r.IntN(3), IDs: r.IntN(3)}
	s.Background = background && r.IntN(2) == 0
	n := s.Levels
	if s.Background {
		n++
	}
	for l := range n {
		var names []string
		for k := range 1 + r.IntN(3) {
			kind := "p"
			if r.IntN(2) == 0 {
				kind = "g"
			}
			names = append(names, fmt.Sprintf("%s%d_%d", kind, l, k))
		}
		s.Tools = append(s.Tools, names)
	}
	return s
}

func (s Schedule) String() string {
	str := fmt.Sprintf("%d levels, tools %v, id mode %d, background %v", s.Levels, s.Tools, s.IDs, s.Background)
	if s.tree {
		str += fmt.Sprintf(", validated %v, resident %d (compact %d), token limit %d, cost limit %v, rate limited %v, rerun %v",
			s.Validated, s.Resident, s.Compact, s.TokenLimit, s.CostLimit, s.RateLimited, s.Rerun)
	}
	return str
}

// A World is one schedule's tools and models, and what they counted.
type World struct {
	S Schedule

	admission *provider.Admission // of a RateLimited schedule
	billing   billing

	mu      sync.Mutex
	ran     map[string]int // executions by tool
	answers atomic.Int64   // model answers given
	reqs    atomic.Int64   // requests, for fresh ids
	crashAt atomic.Int64   // the model call of this run that crashes (0: none)
	calls   atomic.Int64   // model calls of this run

	// Crash is called at the model call NextRun names, which then waits
	// for the run's context to end; the test sets it to cancel the run,
	// to go away as its client, or to kill the process.
	Crash func()
	// CrashIn, when set, says which levels' model calls count toward the
	// call NextRun names (the job's child's level is Levels); nil: all.
	CrashIn func(level int) bool
	// Log, when set, is told of every execution and model answer; a test
	// whose process is killed keeps the log in a file.
	Log func(line string)
	// IDPrefix starts the fresh ids, so that processes never repeat them.
	IDPrefix string
	// Apart: an agent calls its tools in one step and the next level in
	// the next, so that no model call runs beside a tool whose result is
	// not yet recorded (a process killed between a tool's effect and its
	// record runs the tool again: that is the one window at-least-once
	// remains in). Apart schedules have no background job.
	Apart bool
}

// New returns the world of s.
func New(s Schedule) *World {
	w := &World{S: s, ran: map[string]int{}}
	w.billing.paid = map[string]int{}
	w.billing.levels = map[int]Bill{}
	w.billing.refused = map[string]bool{}
	if s.RateLimited {
		// Admission retries a 429 after the Retry-After the model gives.
		w.admission, _ = provider.NewAdmission()
	}
	return w
}

// Ran is how many times the tool named name ran, over all runs.
func (w *World) Ran(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ran[name]
}

// Answers is how many answers the models gave, over all runs.
func (w *World) Answers() int64 { return w.answers.Load() }

// NextRun resets the count of model calls for a new run, which crashes
// at its crashAt-th model call (0: never).
func (w *World) NextRun(crashAt int64) {
	w.calls.Store(0)
	w.crashAt.Store(crashAt)
}

// ModelAnswers is how many answers the schedule's models give in all.
func (w *World) ModelAnswers() int {
	switch {
	case w.Apart:
		return 3*w.S.Levels - 1
	case w.S.Background:
		return 2*w.S.Levels + 3
	}
	return 2 * w.S.Levels
}

// countCall counts a model call of level toward the crash, and returns
// its number (0: not counted).
func (w *World) countCall(level int) int64 {
	if w.CrashIn != nil && !w.CrashIn(level) {
		return 0
	}
	return w.calls.Add(1)
}

// bgLevel is the level of the background job's child.
func (w *World) bgLevel() int { return w.S.Levels }

// isJobAnswer reports whether a tool result is the background job's
// answer, as the jobs tool's wait hands it back.
func (w *World) isJobAnswer(content string) bool {
	return strings.HasPrefix(content, fmt.Sprintf("L%d[", w.bgLevel()))
}

func (w *World) model(level int) provider.Provider {
	var p provider.Provider = provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if n := w.countCall(level); n > 0 && n == w.crashAt.Load() {
			// The process dies, or the client goes away, as the model is
			// asked: the call ends when the run's context does, as a real
			// provider's call does.
			w.Crash()
			select {
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			case <-time.After(30 * time.Second):
				return provider.Response{}, errors.New("resumetest: the crashed run's context did not end in 30 s")
			}
		}
		fp := fingerprint(level, req)
		if err := w.refuse(level, fp, req); err != nil {
			return provider.Response{}, err
		}
		msg := w.reply(level, req)
		usage := provider.Usage{Requests: 1}
		stop := provider.StopEndTurn
		if len(msg.ToolCalls) > 0 {
			stop = provider.StopToolUse
		}
		if w.S.tree && req.MaxTokens > 0 && len(msg.ToolCalls) == 0 && 1+len(msg.Content)/4 > req.MaxTokens {
			// A real model stops where max_tokens says: the reply is cut
			// short and billed at most that many tokens.
			msg.Content = msg.Content[:4*req.MaxTokens-1]
			stop = provider.StopMaxTokens
		}
		if w.S.tree {
			// Counted as a tokenizer of four bytes a token would count
			// them, so that the agents' estimates are close.
			usage.InputTokens = 1 + requestBytes(req)/4
			usage.OutputTokens = 1 + int64(replyBytes(msg))/4
		} else {
			usage.InputTokens, usage.OutputTokens = 10, 1
		}
		w.bill(level, fp, usage)
		return provider.Response{Message: msg, Usage: usage, Model: Model, StopReason: stop}, nil
	})
	if w.S.RateLimited {
		p = provider.Admit(p, w.admission)
	}
	return p
}

// turnMessages returns the messages of the request's own turn: those after
// its task, the last user message that is not a budget note.
func turnMessages(req provider.Request) (task string, turn []provider.Message) {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role == provider.RoleUser && !strings.HasPrefix(m.Content, "Budget note:") {
			return m.Content, req.Messages[i+1:]
		}
	}
	return "", req.Messages
}

// reply is the answer of the agent at level to req.
func (w *World) reply(level int, req provider.Request) provider.Message {
	if req.System == agent.DefaultSummaryPrompt {
		return provider.AssistantMessage(fmt.Sprintf("L%d summary", level))
	}
	task, turn := turnMessages(req)
	validated := level < len(w.S.Validated) && w.S.Validated[level]
	if validated && strings.Contains(task, "Your answer was rejected") {
		// The corrective run answers at once with what it had.
		return provider.AssistantMessage(`{"status":"success","summary":"L` + strconv.Itoa(level) + `[corrected]","findings":null}`)
	}
	var results []string
	job := ""
	for _, m := range turn {
		if m.Role != provider.RoleTool {
			continue
		}
		var receipt struct {
			JobID string `json:"job_id"`
		}
		if json.Unmarshal([]byte(m.Content), &receipt) == nil && receipt.JobID != "" {
			job = receipt.JobID
			continue
		}
		results = append(results, m.Content)
	}
	next := level+1 < w.S.Levels // never for the job's child, whose level is Levels
	tools := w.S.Tools[level]
	background := level == 0 && w.S.Background
	var calls []provider.ToolCall
	call := func(name, args string) {
		id := ""
		switch w.S.IDs {
		case IDsFresh:
			id = fmt.Sprint("call_", w.IDPrefix, w.reqs.Add(1))
		case IDsRestart:
			id = fmt.Sprint("call_", len(calls))
		}
		calls = append(calls, provider.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)})
	}
	callNext := func() {
		name := fmt.Sprintf("level%d", level+1)
		call(name, `{"task":"go on"}`)
		if level+1 == w.S.Resident {
			call(name, `{"task":"go on again"}`)
		}
	}
	first := len(results) == 0 && job == ""
	switch {
	case first:
		for _, name := range tools {
			call(name, `{"task":"`+name+`"}`)
		}
		if next && !w.Apart {
			callNext()
		}
		if background {
			call(subagent.SpawnToolName, `{"task":"in the background","background":true}`)
		}
	case w.Apart && next && len(results) == len(tools):
		callNext()
	case background && !slices.ContainsFunc(results, w.isJobAnswer):
		call(subagent.JobsToolName, `{"action":"wait","job_id":"`+job+`"}`)
	}
	if len(calls) > 0 && (len(req.Tools) > 0 || !w.S.tree) {
		return provider.AssistantMessage("", calls...)
	}
	// The answer; or, offered no tools (a wrap-up turn), what it has.
	slices.Sort(results)
	answer := fmt.Sprintf("L%d[%s]", level, strings.Join(results, ";"))
	if validated {
		if w.invalidFirst(level, task) {
			return provider.AssistantMessage(badAnswers[len(task)%len(badAnswers)])
		}
		b, _ := json.Marshal(map[string]any{"status": "success", "summary": answer, "findings": nil})
		answer = string(b)
	}
	return provider.AssistantMessage(answer)
}

// badAnswers are the first answers of a validated child: no JSON, and
// JSON that does not fit the report's schema.
var badAnswers = []string{"I am done, more or less.", `{"status":"finished"}`}

// invalidFirst reports whether the validated agent at level answers its
// task, the first time, with a bad answer: always, except that a resident
// is validated never.
func (w *World) invalidFirst(level int, task string) bool {
	return level != w.S.Resident && !strings.Contains(task, "Your answer was rejected")
}

// Lead returns the schedule's lead agent, its sub-agents built afresh on
// every call as a factory would.
func (w *World) Lead() (agent.Agent, error) { return w.agent(0) }

func (w *World) tools(level int) []tool.Tool {
	var tools []tool.Tool
	for _, name := range w.S.Tools[level] {
		var tl tool.Tool = tool.Func{Def: tool.Definition{Name: name, Description: "A tool.", Parameters: json.RawMessage(`{"type":"object"}`)},
			Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
				w.mu.Lock()
				w.ran[name]++
				w.mu.Unlock()
				if w.Log != nil {
					w.Log("ran " + name)
				}
				return tool.Result{Content: "ran " + name}, nil
			}}
		if name[0] == 'g' {
			tl = tool.RequireApproval(tl, "", 0)
		}
		tools = append(tools, tl)
	}
	return tools
}

func (w *World) agent(level int) (agent.Agent, error) {
	tools := w.tools(level)
	if level+1 < w.S.Levels {
		next, err := w.child(level + 1)
		if err != nil {
			return nil, err
		}
		tools = append(tools, next)
	}
	if level == 0 && w.S.Background {
		reg, err := tool.NewRegistry(w.tools(w.bgLevel())...)
		if err != nil {
			return nil, err
		}
		sp, err := subagent.NewSpawner(w.model(w.bgLevel()), reg, subagent.WithBackground())
		if err != nil {
			return nil, err
		}
		tools = append(tools, sp, sp.JobsTool())
	}
	opts := []agent.Option{agent.WithName(fmt.Sprintf("level%d", level)), agent.WithTools(tools...)}
	if w.S.tree && level == 0 {
		opts = append(opts, agent.WithPrices(Prices))
		if w.S.TokenLimit > 0 {
			opts = append(opts, agent.WithTokenLimit(w.S.TokenLimit))
		}
		if w.S.CostLimit > 0 {
			opts = append(opts, agent.WithCostLimit(w.S.CostLimit))
		}
	}
	if level == w.S.Resident && level > 0 && w.S.Compact == CompactDue {
		opts = append(opts, agent.WithCompaction(agent.Compaction{MaxMessages: 4}))
	}
	return agent.NewReact(w.model(level), opts...)
}

// child returns the sub-agent tool of level, as its parent has it.
func (w *World) child(level int) (*subagent.SubAgentTool, error) {
	name := fmt.Sprintf("level%d", level)
	if level == w.S.Resident && level > 0 {
		// One resident for this invocation of its parent, which asks it
		// twice.
		a, err := w.agent(level)
		if err != nil {
			return nil, err
		}
		return subagent.FromAgent(name, "The next level.", a, subagent.WithMaxDepth(3))
	}
	opts := []subagent.Option{subagent.WithMaxDepth(3)}
	if level < len(w.S.Validated) && w.S.Validated[level] {
		opts = append(opts, subagent.WithReport())
	}
	return subagent.FromFactory(name, "The next level.", func(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
		return w.agent(level)
	}, opts...)
}

// Questions is what a person was asked over a schedule's runs, and what
// they answered.
type Questions struct {
	asked    map[string]string // question (message) → its id
	Approved map[string]bool   // gated tool → the answer given
}

// Answer answers the interrupts of one run at random, approve or reject,
// and reports a question asked again under a new id, or asked again after
// its answer.
func (q *Questions) Answer(r *rand.Rand, interrupts []tool.Interrupt) (answers []tool.Answer, problems []string) {
	if q.asked == nil {
		q.asked, q.Approved = map[string]string{}, map[string]bool{}
	}
	for _, it := range interrupts {
		if id, seen := q.asked[it.Message]; seen && id != it.ID {
			problems = append(problems, fmt.Sprintf("%q asked again as %s, first as %s", it.Message, it.ID, id))
		}
		q.asked[it.Message] = it.ID
		name := strings.Fields(strings.TrimPrefix(it.Message, "Allow "))[0]
		if _, answered := q.Approved[name]; answered {
			problems = append(problems, fmt.Sprintf("%s asked again after its answer", name))
		}
		yes := r.IntN(3) > 0
		q.Approved[name] = yes
		answers = append(answers, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(fmt.Sprintf(`{"approved":%v}`, yes))})
	}
	return answers, problems
}

// Check reports each broken invariant once the schedule's runs have
// ended with answer: each approved call ran exactly once and a rejected
// one never, a plain call once (the resident's twice); and, in a schedule
// of NewSchedule, every model answer was asked for once over all the
// runs (in one of NewTreeSchedule, see PaidTwice). A turn a limit may have cut
// short (cut) may have left calls unmade: then each ran at most as
// often, an approved one exactly once still, and the answer may be
// missing.
func (w *World) Check(q *Questions, answer string, cut bool) []string {
	var problems []string
	for l, names := range w.S.Tools {
		for _, name := range names {
			want := w.S.Runs(l)
			approved, asked := q.Approved[name]
			if name[0] == 'g' && !approved {
				want = 0
			}
			got := w.Ran(name)
			if got == want || cut && got < want && !(name[0] == 'g' && asked) {
				continue
			}
			problems = append(problems, fmt.Sprintf("level %d: %s ran %d times, want %d (approved %v, asked %v)", l, name, got, want, approved, asked))
		}
	}
	if w.S.tree {
		// The test checks PaidTwice, which knows more than a count.
	} else if got, want := w.Answers(), int64(w.ModelAnswers()); got != want {
		problems = append(problems, fmt.Sprintf("%d model answers over all the runs, want %d", got, want))
	}
	if (!cut || answer != "") && !strings.HasPrefix(answer, "L0[") {
		problems = append(problems, fmt.Sprintf("the answer %q", answer))
	}
	return problems
}

// Limited reports whether a limit bounds the schedule's lead.
func (s Schedule) Limited() bool { return s.TokenLimit > 0 || s.CostLimit > 0 }

// CheckUsage reports usage, what the last run of the turn reported for
// the whole turn, unless it counts every model answer once: the runs
// before it spent part of it, which the last run counts from the journal
// (agent.Output.Earlier) and reports, so that what the models billed is
// what the turn reports. all is false when some runs ended with their
// work lost (a new run cut short does its work again): then it counts
// each answer at most once.
func (w *World) CheckUsage(usage provider.Usage, all bool) []string {
	want := int64(w.ModelAnswers())
	if usage.Requests == want || !all && usage.Requests < want {
		return nil
	}
	return []string{fmt.Sprintf("usage of the whole turn %+v, want %d requests, one per model answer", usage, want)}
}
