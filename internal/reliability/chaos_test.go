package reliability

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/conversation"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// chaosRuns is the number of parent runs; DEPUTY_CHAOS_RUNS changes it
// (CI runs the default, a manual run as many as it likes).
func chaosRuns(t *testing.T) int {
	if s := os.Getenv("DEPUTY_CHAOS_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("DEPUTY_CHAOS_RUNS=%q: want a positive number", s)
		}
		return n
	}
	if testing.Short() {
		return 50
	}
	return 300
}

// chaosSeed is the suite's seed: DEPUTY_CHAOS_SEED replays a failure.
func chaosSeed(t *testing.T) uint64 {
	if s := os.Getenv("DEPUTY_CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("DEPUTY_CHAOS_SEED=%q: want a number", s)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

type runKey struct{}

// model is the synthetic model behind every agent of the chaos suite. What
// it says is drawn from the seed and the request, so a seed replays a run
// whatever order concurrent calls come in.
func model(seed uint64) provider.Func {
	return func(ctx context.Context, req provider.Request) (provider.Response, error) {
		r := rngFor(seed, agent.Name(ctx), req)
		name := agent.Name(ctx)
		last := req.Messages[len(req.Messages)-1]
		var msg provider.Message
		switch {
		case name == "lead" && last.Role == provider.RoleUser:
			msg = provider.AssistantMessage("", leadCalls(r)...)
		case name == "lead":
			msg = provider.AssistantMessage("done")
		case name == "worker":
			// Sometimes a valid result, sometimes prose, sometimes a bad shape.
			switch r.IntN(4) {
			case 0:
				msg = provider.AssistantMessage("I looked into it.")
			case 1:
				msg = provider.AssistantMessage(`{"status":"maybe","summary":"?"}`)
			default:
				msg = provider.AssistantMessage(`{"status":"success","summary":"worked","findings":null}`)
			}
		default:
			msg = provider.AssistantMessage(name + " answers " + strconv.Itoa(r.IntN(1000)))
		}
		return provider.Response{Message: msg, Usage: fake.Usage(req, msg), StopReason: provider.StopEndTurn}, nil
	}
}

func leadCalls(r *rand.Rand) []provider.ToolCall {
	var calls []provider.ToolCall
	for range r.IntN(3) {
		calls = append(calls, provider.ToolCall{Name: "expert", Arguments: []byte(`{"task":"question ` + strconv.Itoa(r.IntN(100)) + `"}`)})
	}
	for range r.IntN(3) {
		calls = append(calls, provider.ToolCall{Name: "worker", Arguments: []byte(`{"task":"job"}`)})
	}
	if r.IntN(2) == 0 {
		for range r.IntN(17) {
			args := `{"task":"research ` + strconv.Itoa(r.IntN(100)) + `"`
			if r.IntN(3) == 0 {
				args += `,"output_schema":{"type":"string"}`
			}
			if r.IntN(5) == 0 {
				// Left running when the lead answers: the run must cancel
				// it, close its events and count its usage.
				args += `,"background":true`
			}
			calls = append(calls, provider.ToolCall{Name: subagent.SpawnToolName, Arguments: []byte(args + "}")})
		}
	}
	if len(calls) == 0 {
		calls = append(calls, provider.ToolCall{Name: "expert", Arguments: []byte(`{"task":"anything"}`)})
	}
	return calls
}

func rngFor(seed uint64, name string, req provider.Request) *rand.Rand {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(name))
	for _, m := range req.Messages {
		h.Write([]byte(m.Content))
		for _, c := range m.ToolCalls {
			h.Write(c.Arguments)
		}
	}
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// streaming makes a provider stream: each reply's text in two pieces and its
// tool calls whole, then the response.
type streaming struct{ p provider.Provider }

func (s streaming) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	return s.p.Complete(ctx, req)
}

func (s streaming) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	resp, err := s.p.Complete(ctx, req)
	if err != nil || onDelta == nil {
		return resp, err
	}
	text := resp.Message.Content
	for _, piece := range []string{text[:len(text)/2], text[len(text)/2:]} {
		if piece == "" {
			continue
		}
		if err := onDelta(provider.Delta{Text: piece}); err != nil {
			return provider.Response{}, err
		}
	}
	for i, c := range resp.Message.ToolCalls {
		if err := onDelta(provider.Delta{ToolCall: provider.ToolCallDelta{Index: i, ID: c.ID, Name: c.Name, Arguments: string(c.Arguments)}}); err != nil {
			return provider.Response{}, err
		}
	}
	return resp, nil
}

// recorder keeps a run's events.
type recorder struct {
	mu     sync.Mutex
	events []event.Event
}

func (r *recorder) Emit(e event.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// TestChaos drives parent runs with a resident expert, validated factory
// children and spawned fan-outs of up to 16 children through a provider
// that fails, stalls, truncates, empties, panics and cancels at random, and
// checks every invariant after every run.
func TestChaos(t *testing.T) {
	seed := chaosSeed(t)
	runs := chaosRuns(t)
	t.Logf("seed %d, %d runs (replay with DEPUTY_CHAOS_SEED=%d DEPUTY_CHAOS_RUNS=%d)", seed, runs, seed, runs)
	defer func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d: replay with DEPUTY_CHAOS_SEED=%d DEPUTY_CHAOS_RUNS=%d", seed, seed, runs)
		}
	}()

	// Every agent of a run reaches the model through that run's faulty
	// wrapper, found in the context, so each run has its own ground truth.
	routed := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		return ctx.Value(runKey{}).(*fake.Faulty).Complete(ctx, req)
	})
	// Odd runs go through a streaming provider, so that the streamed event
	// path meets the same faults.
	streamed := streaming{routed}

	// The faults include "context window exceeded", on which an agent
	// compacts its conversation and asks again; this resident keeps every
	// turn, so that its conversation can be checked turn for turn.
	expertAgent, err := agent.NewReact(routed, agent.WithName("expert"), agent.WithoutCompaction())
	if err != nil {
		t.Fatal(err)
	}
	expert, err := subagent.FromAgent("expert", "a resident expert", expertAgent)
	if err != nil {
		t.Fatal(err)
	}
	worker, err := subagent.FromFactory("worker", "a one-shot worker",
		func(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(routed, agent.WithName("worker"), agent.WithMaxSteps(3))
		}, subagent.WithReport(), subagent.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu             sync.Mutex
		expertSuccess  int
		outcomes       = map[string]int{}
		faultsInjected = map[string]int{}
	)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range runs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			faulty := fake.NewFaulty(model(seed), fake.Faults{
				Seed:  seed + uint64(i),
				Error: 0.04, Latency: 0.2, MaxLatency: 3 * time.Millisecond,
				Truncate: 0.05, Empty: 0.03, Panic: 0.01, Cancel: 0.01, CancelFn: cancel,
			})
			ctx = context.WithValue(ctx, runKey{}, faulty)
			rec := &recorder{}
			ctx = event.WithSink(ctx, rec)

			reg, err := tool.NewRegistry(expert, worker)
			if err != nil {
				t.Error(err)
				return
			}
			var model provider.Provider = routed
			if i%2 == 1 {
				model = streamed
			}
			sp, err := subagent.NewSpawner(model, reg, subagent.WithMaxSpawns(16), subagent.WithSpawnConcurrency(16), subagent.WithBackground())
			if err != nil {
				t.Error(err)
				return
			}
			if err := reg.Register(sp); err != nil {
				t.Error(err)
				return
			}
			if err := reg.Register(sp.JobsTool()); err != nil {
				t.Error(err)
				return
			}
			lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithRegistry(reg), agent.WithMaxSteps(4))
			if err != nil {
				t.Error(err)
				return
			}
			out, runErr := lead.Run(ctx, agent.Input{Text: "run " + strconv.Itoa(i)})

			where := fmt.Sprintf("run %d (seed %d)", i, seed)
			checkUsage(t, where, out, faulty)
			ok := checkEvents(t, where, rec.events)
			checkErrors(t, where, runErr, faulty)
			mu.Lock()
			defer mu.Unlock()
			expertSuccess += ok["expert"]
			switch {
			case runErr == nil:
				outcomes["ok"]++
			case errors.Is(runErr, context.Canceled):
				outcomes["cancelled"]++
			default:
				outcomes["failed"]++
			}
			for k, v := range faulty.Injected() {
				faultsInjected[k] += v
			}
		}()
	}
	wg.Wait()

	// The resident's conversation holds exactly the successful calls' turns,
	// each tool call paired with its result.
	hist := expertAgent.History()
	if err := conversation.Check(hist); err != nil {
		t.Errorf("resident conversation broken: %v", err)
	}
	turns := 0
	for _, m := range hist {
		if m.Role == provider.RoleUser {
			turns++
		}
	}
	if turns != expertSuccess {
		t.Errorf("resident conversation has %d turns, want %d (one per successful call)", turns, expertSuccess)
	}
	t.Logf("outcomes %v; resident turns %d; faults %v", outcomes, turns, faultsInjected)
}

// checkUsage: the parent's total is exactly what the model handed out in
// the run, children failed and cancelled included, each counted once.
func checkUsage(t *testing.T, where string, out agent.Output, f *fake.Faulty) {
	t.Helper()
	if got, want := out.TotalUsage(), f.Usage(); got != want {
		t.Errorf("%s: usage %v (own %v + children %v), but the model handed out %v", where, got, out.Usage, out.ChildUsage, want)
	}
}

// checkEvents: every sub-agent and tool call that starts ends exactly once,
// before the run's own end, which comes last. It returns the successful
// sub-agent calls by name.
func checkEvents(t *testing.T, where string, events []event.Event) map[string]int {
	t.Helper()
	if len(events) == 0 {
		t.Errorf("%s: no events", where)
		return nil
	}
	first, last := events[0], events[len(events)-1]
	if first.Type != event.RunStarted {
		t.Errorf("%s: first event %s, want RUN_STARTED", where, first.Type)
	}
	if last.Type != event.RunFinished && last.Type != event.RunError {
		t.Errorf("%s: last event %s, want RUN_FINISHED or RUN_ERROR", where, last.Type)
	}
	open := map[string]string{} // sub-agent run id → name
	ended := map[string]bool{}
	calls := map[string]bool{}
	ok := map[string]int{}
	for i, e := range events {
		if e.Type.RunLevel() && i != 0 && i != len(events)-1 {
			t.Errorf("%s: %s at position %d of %d", where, e.Type, i, len(events))
		}
		if e.SubagentRunID != "" && e.Type != event.SubagentStarted {
			if _, isOpen := open[e.SubagentRunID]; !isOpen {
				t.Errorf("%s: %s attributed to sub-agent %s, which is not running", where, e.Type, e.SubagentRunID)
			}
		}
		switch e.Type {
		case event.SubagentStarted:
			if ended[e.SubagentRunID] || open[e.SubagentRunID] != "" {
				t.Errorf("%s: sub-agent run id %s started twice", where, e.SubagentRunID)
			}
			open[e.SubagentRunID] = e.Name
		case event.SubagentFinished, event.SubagentError:
			name, isOpen := open[e.SubagentRunID]
			if !isOpen {
				t.Errorf("%s: %s for sub-agent %s, which is not running", where, e.Type, e.SubagentRunID)
			}
			if e.Type == event.SubagentFinished {
				ok[name]++
			}
			delete(open, e.SubagentRunID)
			ended[e.SubagentRunID] = true
		case event.ToolCallStart:
			key := e.SubagentRunID + "/" + e.ToolCallID
			if calls[key] {
				t.Errorf("%s: tool call %s started twice", where, key)
			}
			calls[key] = true
		case event.ToolCallEnd:
			key := e.SubagentRunID + "/" + e.ToolCallID
			if !calls[key] {
				t.Errorf("%s: TOOL_CALL_END for %s, which is not open", where, key)
			}
			delete(calls, key)
		}
	}
	if len(open) > 0 {
		t.Errorf("%s: sub-agents never ended: %v", where, open)
	}
	if len(calls) > 0 {
		t.Errorf("%s: tool calls never ended: %v", where, calls)
	}
	return ok
}

// checkErrors: a cancelled run fails with context.Canceled in its chain; a
// run given up after failed tool calls names the cause.
func checkErrors(t *testing.T, where string, err error, f *fake.Faulty) {
	t.Helper()
	if f.Injected()["cancel"] > 0 && (err == nil || !errors.Is(err, context.Canceled)) {
		t.Errorf("%s: the run was cancelled, but Run returned %v", where, err)
	}
	if errors.Is(err, agent.ErrToolRetries) {
		var pe *provider.Error
		if !errors.Is(err, subagent.ErrChildFailed) && !errors.Is(err, tool.ErrInvalidArguments) &&
			!errors.Is(err, subagent.ErrNoJSON) && !errors.Is(err, tool.ErrPanic) && !errors.As(err, &pe) &&
			!errors.Is(err, subagent.ErrTimeout) && !errors.Is(err, subagent.ErrMaxSpawns) {
			t.Errorf("%s: gave up on tools without the cause in the chain: %v", where, err)
		}
	}
	if err != nil && strings.Contains(err.Error(), "%!") {
		t.Errorf("%s: malformed error text: %v", where, err)
	}
}
