package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

var (
	schedules    = flag.Int("schedules", 200, "how many random schedules TestResumeSchedules runs")
	scheduleSeed = flag.Uint64("schedule-seed", 0, "the seed of TestResumeSchedules' first schedule (0: from the clock)")
)

// A schedule is a tree of up to three levels (lead, child, grandchild);
// each agent, in its first step, calls some tools at once — plain ones,
// ones a person must approve, and the next level's sub-agent — and then
// answers with what they returned. The models are functions of what they
// are sent, naming their calls in one of three ways; the runs crash at
// random model calls and are recovered, and each round of questions is
// answered at random, approve or reject.
type schedule struct {
	levels int
	tools  [][]string // by level: the tools its agent calls, "g…" gated
	ids    int        // 0: fresh, 1: none, 2: restarting at call_0
}

func newSchedule(r *rand.Rand) schedule {
	s := schedule{levels: 1 + r.IntN(3), ids: r.IntN(3)}
	for l := range s.levels {
		var names []string
		for k := range 1 + r.IntN(3) {
			kind := "p"
			if r.IntN(2) == 0 {
				kind = "g"
			}
			names = append(names, fmt.Sprintf("%s%d_%d", kind, l, k))
		}
		s.tools = append(s.tools, names)
	}
	return s
}

// world is one schedule's tools and models, and what they counted.
type world struct {
	s       schedule
	mu      sync.Mutex
	ran     map[string]int // executions by tool
	answers atomic.Int64   // model answers given
	reqs    atomic.Int64   // requests, for fresh ids
	crashAt atomic.Int64   // the model call of this run that crashes (0: none)
	calls   atomic.Int64   // model calls of this run
	cancel  atomic.Pointer[context.CancelFunc]

	// For a run in a process that is killed (TestResumeSurvivesSIGKILL):
	// crash kills the process instead of cancelling the run; every
	// execution and model answer is also appended to log, which outlives
	// the process; fresh ids start with idPrefix, the process's own.
	crash    func()
	log      func(line string)
	idPrefix string
	// apart: an agent calls its tools in one step and the next level in
	// the next, so that no model call runs beside a tool whose result is
	// not yet recorded (a process killed between a tool's effect and its
	// record runs the tool again: that is the one window at-least-once
	// remains in).
	apart bool
}

// modelAnswers is how many answers the schedule's models give in all.
func (w *world) modelAnswers() int {
	if w.apart {
		return 3*w.s.levels - 1
	}
	return 2 * w.s.levels
}

func (w *world) model(level int) provider.Provider {
	return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if n := w.calls.Add(1); n == w.crashAt.Load() {
			if w.crash != nil {
				w.crash()
			}
			(*w.cancel.Load())() // the process dies as the model is asked
			return provider.Response{}, ctx.Err()
		}
		w.answers.Add(1)
		if w.log != nil {
			w.log("answer")
		}
		usage := provider.Usage{InputTokens: 10, OutputTokens: 1, Requests: 1}
		var results []string
		for _, m := range req.Messages {
			if m.Role == provider.RoleTool {
				results = append(results, m.Content)
			}
		}
		next := level+1 < w.s.levels
		var names []string
		switch {
		case len(results) == 0 && w.apart:
			names = slices.Clone(w.s.tools[level])
		case len(results) == 0:
			names = slices.Clone(w.s.tools[level])
			if next {
				names = append(names, fmt.Sprintf("level%d", level+1))
			}
		case w.apart && next && len(results) == len(w.s.tools[level]):
			names = []string{fmt.Sprintf("level%d", level+1)}
		default:
			slices.Sort(results)
			return provider.Response{Message: provider.AssistantMessage(fmt.Sprintf("L%d[%s]", level, strings.Join(results, ";"))), Usage: usage}, nil
		}
		var calls []provider.ToolCall
		for _, name := range names {
			id := ""
			switch w.s.ids {
			case 0:
				id = fmt.Sprint("call_", w.idPrefix, w.reqs.Add(1))
			case 2:
				id = fmt.Sprint("call_", len(calls))
			}
			calls = append(calls, provider.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(`{"task":"` + name + `"}`)})
		}
		return provider.Response{Message: provider.AssistantMessage("", calls...), Usage: usage}, nil
	})
}

func (w *world) agent(t testing.TB, level int) agent.Agent {
	var tools []tool.Tool
	for _, name := range w.s.tools[level] {
		var tl tool.Tool = tool.Func{Def: tool.Definition{Name: name, Description: "A tool.", Parameters: json.RawMessage(`{"type":"object"}`)},
			Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
				w.mu.Lock()
				w.ran[name]++
				w.mu.Unlock()
				if w.log != nil {
					w.log("ran " + name)
				}
				return tool.Result{Content: "ran " + name}, nil
			}}
		if name[0] == 'g' {
			tl = tool.RequireApproval(tl, "", 0)
		}
		tools = append(tools, tl)
	}
	if level+1 < w.s.levels {
		tools = append(tools, must(FromFactory(fmt.Sprintf("level%d", level+1), "The next level.", func(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
			return w.agent(t, level+1), nil
		}, WithInput(taskInput), WithMaxDepth(3)))(t))
	}
	return newReact(t, w.model(level), agent.WithName(fmt.Sprintf("level%d", level)), agent.WithTools(tools...))
}

// TestResumeSchedules runs random schedules to the end and checks, on
// each, what a person relies on: each approved call ran exactly once and a
// rejected one never, a plain call once; a question asked again (after a
// crash) keeps its id; every model answer was asked for once over all the
// runs, and paid once. It prints the number of schedules and the seed of
// a failure; -schedules and -schedule-seed run more, or one again.
func TestResumeSchedules(t *testing.T) {
	seed := *scheduleSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	n := *schedules
	if testing.Short() {
		n = min(n, 50)
	}
	st := openStore(t, filepath.Join(t.TempDir(), "deputy.db"))
	for i := range n {
		s := seed + uint64(i)
		if !runSchedule(t, st, s) {
			t.Fatalf("schedule with seed %d failed (rerun it: -run TestResumeSchedules -schedules 1 -schedule-seed %d)", s, s)
		}
	}
	t.Logf("%d schedules passed, seeds %d to %d", n, seed, seed+uint64(n)-1)
}

// runSchedule runs one schedule to its end, reporting each broken
// invariant, and whether all held.
func runSchedule(t *testing.T, st *store.Store, seed uint64) bool {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := &world{s: newSchedule(r), ran: map[string]int{}}
	lead := w.agent(t, 0)
	turn := fmt.Sprint("schedule-", seed)
	ok := true
	fail := func(format string, args ...any) {
		t.Errorf("seed %d (%d levels, tools %v, id mode %d): %s", seed, w.s.levels, w.s.tools, w.s.ids, fmt.Sprintf(format, args...))
		ok = false
	}
	asked := map[string]string{}  // question (message) → its id
	approved := map[string]bool{} // gated tool → the answer given
	var usage provider.Usage
	answers := context.Background()
	var out agent.Output
	for round := 0; ; round++ {
		if round > 40 {
			fail("no end after %d runs", round)
			return false
		}
		j, err := st.Journal(context.Background(), turn)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(answers)
		w.cancel.Store(&cancel)
		w.calls.Store(0)
		w.crashAt.Store(0)
		if r.IntN(3) == 0 {
			w.crashAt.Store(1 + r.Int64N(int64(2*w.s.levels)))
		}
		out, err = lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
		if testing.Verbose() && *schedules == 1 {
			t.Logf("run %d (crash at %d): %q %v; answers %d, ran %v", round, w.crashAt.Load(), out.Answer, err, w.answers.Load(), w.ran)
		}
		cancel()
		usage = usage.Add(out.TotalUsage())
		var in *tool.Interrupted
		switch {
		case err == nil:
		case errors.Is(err, context.Canceled):
			continue // recovered: the same turn, the same answers
		case errors.As(err, &in):
			var given []tool.Answer
			for _, it := range in.Interrupts {
				if id, seen := asked[it.Message]; seen && id != it.ID {
					fail("%q asked again as %s, first as %s", it.Message, it.ID, id)
				}
				asked[it.Message] = it.ID
				name := strings.Fields(strings.TrimPrefix(it.Message, "Allow "))[0]
				if _, answered := approved[name]; answered {
					fail("%s asked again after its answer", name)
				}
				yes := r.IntN(3) > 0
				approved[name] = yes
				given = append(given, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(fmt.Sprintf(`{"approved":%v}`, yes))})
			}
			if answers, err = tool.Resume(context.Background(), in, given...); err != nil {
				t.Fatal(err)
			}
			continue
		default:
			fail("run %d: %v", round, err)
			return false
		}
		break
	}
	for l, names := range w.s.tools {
		for _, name := range names {
			want := 1
			if name[0] == 'g' && !approved[name] {
				want = 0
			}
			if got := w.ran[name]; got != want {
				fail("level %d: %s ran %d times, want %d (approved %v)", l, name, got, want, approved[name])
			}
		}
	}
	// Two answers per agent, each asked once over all the runs, and paid once.
	if got, want := w.answers.Load(), int64(2*w.s.levels); got != want {
		fail("%d model answers over all the runs, want %d", got, want)
	}
	if usage.Requests != int64(2*w.s.levels) {
		fail("usage over all the runs %+v, want %d requests", usage, 2*w.s.levels)
	}
	if !strings.HasPrefix(out.Answer, "L0[") {
		fail("the answer %q", out.Answer)
	}
	_ = st.DeleteJournal(context.Background(), turn)
	return ok
}
