package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/journal/stored"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/tool"
)

// testLease is the lease of the tests' stores: short, so that a lock a
// killed process held is soon free for the next, and long enough that its
// holder's renewals (every third of it) keep it on a loaded machine, where
// a goroutine may wait most of a second to run and a write as long for the
// database (300 ms lost a long test's lock at load 20).
const testLease = 3 * time.Second

// openStore opens the store in the file at path; the test closes it.
func openStore(t testing.TB, path string, opts ...store.Option) *store.Store {
	t.Helper()
	b, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(b, append([]store.Option{store.WithLeaseTTL(testLease)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// echo is a model that answers "A:" and the last user message, counting
// its calls.
type echo struct{ calls atomic.Int64 }

func (e *echo) provider() provider.Provider {
	return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		e.calls.Add(1)
		last := ""
		for _, m := range req.Messages {
			if m.Role == provider.RoleUser {
				last = m.Content
			}
		}
		return provider.Response{Message: provider.AssistantMessage("A:" + last), Usage: provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}}, nil
	})
}

// storedExpert builds a resident over p whose conversation is stored in st.
func storedExpert(t testing.TB, p provider.Provider, st *store.Store, opts ...Option) *SubAgentTool {
	t.Helper()
	r := newReact(t, p, agent.WithName("expert"))
	return must(FromAgent("expert", "Knows things.", r, append([]Option{WithInputFromArgs(argsTask), WithStore(st, "expert")}, opts...)...))(t)
}

func storedMessages(t testing.TB, st *store.Store) ([]provider.Message, int64) {
	t.Helper()
	_, _, at, err := st.ReadParts(context.Background(), "expert", store.Parts{})
	if errors.Is(err, store.ErrNotFound) {
		return nil, 0
	}
	if err != nil {
		t.Fatal(err)
	}
	version := at.Version
	r := newReact(t, fake.NewProvider())
	d := &durable{st: st, key: "expert"}
	if err := d.load(context.Background(), "expert", r); err != nil {
		t.Fatal(err)
	}
	return r.History(), version
}

func TestStoredExpertContinuesInAnotherInstance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deputy.db")
	ctx := context.Background()
	m := &echo{}
	first := storedExpert(t, m.provider(), openStore(t, path))
	if _, err := callTool(ctx, first, "c1", `{"task":"one"}`); err != nil {
		t.Fatal(err)
	}
	// Another process: a new store, a new agent, the same file and key.
	var seen []provider.Message
	p := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		seen = req.Messages
		return provider.Response{Message: provider.AssistantMessage("A:two")}, nil
	})
	st := openStore(t, path)
	second := storedExpert(t, p, st)
	if _, err := callTool(ctx, second, "c2", `{"task":"two"}`); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(seen), fmt.Sprint([]provider.Message{
		provider.UserMessage("one"), provider.AssistantMessage("A:one"), provider.UserMessage("two"),
	}); got != want {
		t.Fatalf("the second instance's model saw\n%s\nwant\n%s", got, want)
	}
	if msgs, version := storedMessages(t, st); len(msgs) != 4 || version != 2 {
		t.Fatalf("stored %d messages at version %d, want 4 at 2", len(msgs), version)
	}
	// The first instance, behind by one turn, catches up before its call.
	if _, err := callTool(ctx, first, "c3", `{"task":"three"}`); err != nil {
		t.Fatal(err)
	}
	if msgs, _ := storedMessages(t, st); len(msgs) != 6 || msgs[3].Content != "A:two" {
		t.Fatalf("after the first instance's second call: %v", msgs)
	}
}

func TestStoredExpertFailedOrCancelledCallStoresNothing(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "deputy.db"))
	// The third call is cancelled while its model is answering.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := fake.NewProvider(
		fake.Text("first answer"),
		fake.Error(errors.New("the model is down")),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			cancel()
			<-ctx.Done()
			return provider.Response{}, context.Cause(ctx)
		}),
		fake.Text("second answer"),
	)
	ex := storedExpert(t, p, st)
	if _, err := callTool(ctx, ex, "c1", `{"task":"one"}`); err != nil {
		t.Fatal(err)
	}
	before, v := storedMessages(t, st)
	if _, err := callTool(ctx, ex, "c2", `{"task":"fails"}`); !errors.Is(err, ErrChildFailed) {
		t.Fatalf("a failing model: %v, want ErrChildFailed", err)
	}
	if _, err := callTool(cctx, ex, "c3", `{"task":"cancelled"}`); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled call: %v", err)
	}
	after, v2 := storedMessages(t, st)
	if fmt.Sprint(before) != fmt.Sprint(after) || v != v2 {
		t.Fatalf("failed calls changed the stored conversation:\n%v (v%d)\n%v (v%d)", before, v, after, v2)
	}
	if _, err := callTool(ctx, ex, "c4", `{"task":"two"}`); err != nil {
		t.Fatal(err)
	}
	if msgs, _ := storedMessages(t, st); len(msgs) != 4 || msgs[2].Content != "two" {
		t.Fatalf("after a good call: %v", msgs)
	}
}

// flaky fails every nth write of its backend.
type flaky struct {
	store.Backend
	n, puts atomic.Int64
}

var errInjected = errors.New("injected write failure")

func (f *flaky) Put(ctx context.Context, ws ...store.Write) error {
	if f.puts.Add(1)%f.n.Load() == 0 {
		return errInjected
	}
	return f.Backend.Put(ctx, ws...)
}

func TestStoredExpertWriteFailureUndoesTheTurn(t *testing.T) {
	ctx := context.Background()
	b, err := sqlite.Open(filepath.Join(t.TempDir(), "deputy.db"))
	if err != nil {
		t.Fatal(err)
	}
	fb := &flaky{Backend: b}
	fb.n.Store(3)
	st, err := store.New(fb)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := &echo{}
	ex := storedExpert(t, m.provider(), st)
	ok := 0
	for i := range 12 {
		_, err := callTool(ctx, ex, "c", fmt.Sprintf(`{"task":"q%d"}`, i))
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, errInjected) || tool.IsCorrectable(err):
			t.Fatalf("call %d: %v, want the store's error, for the program", i, err)
		}
	}
	if ok == 12 || ok == 0 {
		t.Fatalf("%d of 12 calls succeeded: the faults were not injected as planned", ok)
	}
	msgs, _ := storedMessages(t, st)
	if len(msgs) != 2*ok {
		t.Fatalf("stored %d messages after %d good calls: a turn was stored in part", len(msgs), ok)
	}
	for i := 0; i < len(msgs); i += 2 {
		if msgs[i+1].Content != "A:"+msgs[i].Content {
			t.Fatalf("message %d %q answered by %q", i, msgs[i].Content, msgs[i+1].Content)
		}
	}
	// The in-memory conversation matches the stored one: the next
	// model call sees exactly what is stored.
	if h := ex.resident.(*agent.React).History(); fmt.Sprint(h) != fmt.Sprint(msgs) {
		t.Fatalf("memory and store differ:\n%v\n%v", h, msgs)
	}
}

func TestStoredExpertDeletedMemoryStartsAfresh(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "deputy.db"))
	var seen atomic.Int64
	p := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		seen.Store(int64(len(req.Messages)))
		return provider.Response{Message: provider.AssistantMessage("ok")}, nil
	})
	ex := storedExpert(t, p, st)
	for range 2 {
		if _, err := callTool(ctx, ex, "c", `{"task":"q"}`); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Delete(ctx, "expert"); err != nil {
		t.Fatal(err)
	}
	if _, err := callTool(ctx, ex, "c", `{"task":"q"}`); err != nil {
		t.Fatal(err)
	}
	if seen.Load() != 1 {
		t.Fatalf("after deleting the memory the model saw %d messages, want only the new question", seen.Load())
	}
}

func TestStoredExpertSizeBound(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "deputy.db"), store.WithMaxRecordBytes(4096))
	big := strings.Repeat("long ", 1000)
	ex := storedExpert(t, fake.NewProvider(fake.Text("short"), fake.Text(big), fake.Text("short again")), st)
	if _, err := callTool(ctx, ex, "c", `{"task":"q"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := callTool(ctx, ex, "c", `{"task":"q"}`); !errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), "WithHistoryLimit") {
		t.Fatalf("a turn past the size bound: %v, want ErrTooLarge saying what to do", err)
	}
	if msgs, _ := storedMessages(t, st); len(msgs) != 2 {
		t.Fatalf("stored %d messages, want the first turn's 2", len(msgs))
	}
	if _, err := callTool(ctx, ex, "c", `{"task":"q"}`); err != nil {
		t.Fatalf("the call after a refused one: %v", err)
	}
}

func TestWithStoreRefusedWhereItHasNoMeaning(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "deputy.db"))
	p := fake.NewProvider()
	_, err := FromFactory("x", "", func(context.Context, json.RawMessage) (agent.Agent, error) { return nil, nil }, WithStore(st, "k"))
	if err == nil || !strings.Contains(err.Error(), "FromAgent") {
		t.Errorf("FromFactory with WithStore: %v", err)
	}
	if _, err := FromReact("x", "", p, nil, WithStore(st, "k")); err == nil {
		t.Error("FromReact accepted WithStore")
	}
	if _, err := NewSpawner(p, nil, WithStore(st, "k")); err == nil {
		t.Error("NewSpawner accepted WithStore")
	}
	a := agent.Func(func(context.Context, agent.Input) (agent.Output, error) { return agent.Output{}, nil })
	if _, err := FromAgent("x", "", a, WithStore(st, "k")); err == nil || !strings.Contains(err.Error(), "Persistent") {
		t.Errorf("FromAgent of an agent that cannot save: %v", err)
	}
	if _, err := FromAgent("x", "", newReact(t, p), WithStore(nil, "k")); err == nil {
		t.Error("WithStore(nil) accepted")
	}
	if _, err := FromAgent("x", "", newReact(t, p), WithStore(st, "")); err == nil {
		t.Error("WithStore with an empty key accepted")
	}
}

func TestStoredExpertRefusesWhenAnotherProcessHasIt(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "deputy.db"))
	lk, err := st.Lock(ctx, "expert/expert") // another process, in the middle of a call
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock()
	ex := storedExpert(t, fake.NewProvider(fake.Text("x")), st, WithRefuseWhenBusy())
	if _, err := callTool(ctx, ex, "c", `{"task":"q"}`); !errors.Is(err, ErrBusy) || !tool.IsCorrectable(err) {
		t.Fatalf("calling a stored expert another process holds: %v, want a correctable ErrBusy", err)
	}
}

// The tests below run part of their work in a child process, the test
// binary run again with durableChildEnv naming what to do.
const durableChildEnv = "DEPUTY_DURABLE_CHILD"

// runChild runs TestDurableChildProcess in a child process and returns how
// it ended.
func runChild(t *testing.T, mode, path string) (*os.ProcessState, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDurableChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), durableChildEnv+"="+mode, "DEPUTY_DURABLE_PATH="+path)
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState, string(out)
}

func killedBySIGKILL(ps *os.ProcessState) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// TestDurableChildProcess is the child process's side; it does nothing in
// an ordinary run.
func TestDurableChildProcess(t *testing.T) {
	mode := os.Getenv(durableChildEnv)
	if mode == "" {
		t.Skip("run by the tests that kill a process")
	}
	path := os.Getenv("DEPUTY_DURABLE_PATH")
	ctx := context.Background()
	kill := func() { syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	switch {
	case mode == "resident":
		// Killed while the model answers the second question.
		p := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			kill()
			select {}
		})
		ex := storedExpert(t, p, openStore(t, path))
		callTool(ctx, ex, "c", `{"task":"never answered"}`)
	case mode == "compacting":
		// Killed while the summary of a compaction is being written.
		summarizer := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			kill()
			select {}
		})
		ex := compactingExpert(t, (&echo{}).provider(), summarizer, openStore(t, path))
		callTool(ctx, ex, "c", `{"task":"never answered"}`)
	case mode == "fanout":
		st := openStore(t, path)
		// Journal writes land while later children run; the kill waits
		// until some have, so that the resumed turn has some to replay.
		p, _ := fanOut(t, 60, func() {
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if j, err := st.Journal(ctx, "turn-1"); err == nil && j.Len() > 0 {
					return
				}
			}
		})
		j, err := st.Journal(ctx, "turn-1")
		if err != nil {
			t.Fatal(err)
		}
		p.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
	case strings.HasPrefix(mode, "hammer-"):
		m := &echo{}
		ex := storedExpert(t, m.provider(), openStore(t, path))
		for i := range 10 {
			if _, err := callTool(ctx, ex, "c", fmt.Sprintf(`{"task":"%s-%d"}`, mode, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestStoredExpertSurvivesSIGKILLMidCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deputy.db")
	ctx := context.Background()
	{
		st := openStore(t, path)
		if _, err := callTool(ctx, storedExpert(t, (&echo{}).provider(), st), "c", `{"task":"one"}`); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	before, v := storedMessages(t, openStore(t, path))
	ps, out := runChild(t, "resident", path)
	if !killedBySIGKILL(ps) {
		t.Fatalf("the child process was not killed: %v\n%s", ps, out)
	}
	st := openStore(t, path)
	after, v2 := storedMessages(t, st)
	if fmt.Sprint(before) != fmt.Sprint(after) || v != v2 {
		t.Fatalf("a killed call changed the stored conversation:\n%v\n%v", before, after)
	}
	// The dead process's lease runs out; the expert answers again.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := callTool(cctx, storedExpert(t, (&echo{}).provider(), st), "c", `{"task":"two"}`); err != nil {
		t.Fatal(err)
	}
	if msgs, _ := storedMessages(t, st); len(msgs) != 4 || msgs[2].Content != "two" {
		t.Fatalf("after the restart: %v", msgs)
	}
}

// compactingExpert is a stored expert that compacts past four messages,
// keeping one turn, with summaries from summarizer.
func compactingExpert(t testing.TB, p, summarizer provider.Provider, st *store.Store) *SubAgentTool {
	t.Helper()
	r := newReact(t, p, agent.WithName("expert"), agent.WithCompaction(agent.Compaction{MaxMessages: 4, KeepTurns: 1, Summarizer: summarizer}))
	return must(FromAgent("expert", "Knows things.", r, WithInputFromArgs(argsTask), WithStore(st, "expert")))(t)
}

// A process killed while it compacts the stored conversation leaves it as
// it was; the next process compacts it and answers.
func TestStoredExpertSurvivesSIGKILLMidCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deputy.db")
	ctx := context.Background()
	{
		st := openStore(t, path)
		ex := storedExpert(t, (&echo{}).provider(), st)
		for _, q := range []string{"one", "two", "three"} {
			if _, err := callTool(ctx, ex, "c", `{"task":"`+q+`"}`); err != nil {
				t.Fatal(err)
			}
		}
		st.Close()
	}
	before, v := storedMessages(t, openStore(t, path))
	ps, out := runChild(t, "compacting", path)
	if !killedBySIGKILL(ps) {
		t.Fatalf("the child process was not killed: %v\n%s", ps, out)
	}
	st := openStore(t, path)
	after, v2 := storedMessages(t, st)
	if fmt.Sprint(before) != fmt.Sprint(after) || v != v2 {
		t.Fatalf("a process killed mid-compaction changed the stored conversation:\n%v\n%v", before, after)
	}
	summarizer := provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage("asked one, two and three")}, nil
	})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := callTool(cctx, compactingExpert(t, (&echo{}).provider(), summarizer, st), "c", `{"task":"four"}`); err != nil {
		t.Fatal(err)
	}
	msgs, _ := storedMessages(t, st)
	if len(msgs) != 6 || !strings.Contains(msgs[0].Content, "asked one, two and three") || msgs[4].Content != "four" {
		t.Fatalf("after the restart: %v", msgs)
	}
}

func TestStoredExpertTwoProcessesTakeTurns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deputy.db")
	openStore(t, path).Close() // the schema, before both start
	var wg sync.WaitGroup
	outs := make([]string, 2)
	for i := range 2 {
		wg.Go(func() {
			ps, out := runChild(t, "hammer-"+strconv.Itoa(i), path)
			if !ps.Success() {
				outs[i] = out
			}
		})
	}
	wg.Wait()
	for _, o := range outs {
		if o != "" {
			t.Fatalf("a child process failed:\n%s", o)
		}
	}
	msgs, version := storedMessages(t, openStore(t, path))
	if len(msgs) != 40 || version != 20 {
		t.Fatalf("stored %d messages at version %d after 20 calls, want 40 at 20", len(msgs), version)
	}
	seen := map[string]bool{}
	for i := 0; i < 40; i += 2 {
		q, a := msgs[i], msgs[i+1]
		if q.Role != provider.RoleUser || a.Content != "A:"+q.Content || seen[q.Content] {
			t.Fatalf("turn %d is %q → %q: turns interleaved or repeated", i/2, q.Content, a.Content)
		}
		seen[q.Content] = true
	}
}

// fanOut returns a lead agent whose model asks for 100 workers at once,
// each a one-shot child, run 16 at a time so that some finish before a
// kill, and a count of the workers' model calls. With killAt > 0 the
// process kills itself at that worker call, once beforeKill returns; the
// worker calls after it never return.
func fanOut(t testing.TB, killAt int64, beforeKill func()) (*agent.React, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	child := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		switch c := n.Add(1); {
		case killAt > 0 && c == killAt:
			beforeKill()
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		case killAt > 0 && c > killAt:
			select {} // the kill is coming: no later child finishes
		}
		time.Sleep(2 * time.Millisecond)
		return provider.Response{Message: provider.AssistantMessage("done: " + req.Messages[len(req.Messages)-1].Content),
			Usage: provider.Usage{InputTokens: 5, OutputTokens: 1, Requests: 1}}, nil
	})
	worker := must(FromFactory("worker", "Does one task.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(child, agent.WithName("worker"))
	}, WithInputFromArgs(argsTask)))(t)
	calls := make([]provider.ToolCall, 100)
	for i := range calls {
		calls[i] = provider.ToolCall{ID: "call_" + strconv.Itoa(i), Name: "worker", Arguments: []byte(fmt.Sprintf(`{"task":"task %d"}`, i))}
	}
	// The lead answers from what it was sent, as a real model does: asked
	// again after its calls' results, it answers, whichever process asks.
	lead := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("all done")}, nil
		}
		return provider.Response{Message: provider.AssistantMessage("", calls...)}, nil
	})
	return newReact(t, lead, agent.WithName("lead"), agent.WithTools(worker), agent.WithParallelism(16)), &n
}

func TestFanOutResumesAfterSIGKILL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deputy.db")
	ps, out := runChild(t, "fanout", path)
	if !killedBySIGKILL(ps) {
		t.Fatalf("the child process was not killed: %v\n%s", ps, out)
	}
	ctx := context.Background()
	st := openStore(t, path)
	j, err := st.Journal(ctx, "turn-1")
	if err != nil {
		t.Fatal(err)
	}
	finished := finishedCalls(j, 100)
	if finished == 0 || finished >= 60 {
		t.Fatalf("%d children recorded before the kill at the 60th worker call, want some and fewer than 60", finished)
	}
	lead, workerCalls := fanOut(t, 0, nil)
	res, err := lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if got := workerCalls.Load(); got != 100-finished {
		t.Fatalf("the resumed turn ran %d workers, want the %d unfinished", got, 100-finished)
	}
	// It reports the whole turn; the recorded children, paid for by the
	// killed process, are not paid again but counted as spent before.
	if res.ChildUsage.Requests != 100 || res.Earlier.Requests != finished {
		t.Fatalf("the resumed turn counted %d child requests, %d of them earlier; want 100, the %d recorded earlier", res.ChildUsage.Requests, res.Earlier.Requests, finished)
	}
	answers := 0
	for _, m := range res.Messages {
		if m.Role == provider.RoleTool {
			i := strings.TrimPrefix(m.ToolCallID, "call_")
			if m.Content != "done: task "+i {
				t.Fatalf("call %s answered %q", i, m.Content)
			}
			answers++
		}
	}
	if answers != 100 {
		t.Fatalf("%d answers, want 100", answers)
	}
	// A third run of the same turn replays everything.
	lead, workerCalls = fanOut(t, 0, nil)
	j, _ = st.Journal(ctx, "turn-1")
	if _, err := lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"}); err != nil || workerCalls.Load() != 0 {
		t.Fatalf("replaying a finished turn ran %d workers (%v)", workerCalls.Load(), err)
	}
}

func TestSpawnedChildrenReplayFromTheJournal(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "deputy.db"))
	run := func(failSecond bool) (agent.Output, int, error) {
		var children atomic.Int64
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		p := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			// The lead is the agent whose conversation starts with "go"; it
			// spawns one child per turn, then answers.
			if req.Messages[0].Content == "go" {
				switch len(req.Messages) {
				case 1:
					return provider.Response{Message: provider.AssistantMessage("",
						provider.ToolCall{ID: "s1", Name: SpawnToolName, Arguments: []byte(`{"task":"first"}`)})}, nil
				case 3:
					return provider.Response{Message: provider.AssistantMessage("",
						provider.ToolCall{ID: "s2", Name: SpawnToolName, Arguments: []byte(`{"task":"second"}`)})}, nil
				}
				return provider.Response{Message: provider.AssistantMessage("both done")}, nil
			}
			children.Add(1)
			if failSecond && req.Messages[0].Content == "second" {
				cancel() // the process stops here, in effect
				return provider.Response{}, ctx.Err()
			}
			return provider.Response{Message: provider.AssistantMessage("did " + req.Messages[0].Content), Usage: provider.Usage{Requests: 1}}, nil
		})
		sp := must(NewSpawner(p, nil))(t)
		lead := newReact(t, p, agent.WithName("lead"), agent.WithTools(sp))
		j, err := st.Journal(ctx, "spawn-turn")
		if err != nil {
			t.Fatal(err)
		}
		out, err := lead.Run(agent.WithJournal(rctx, j), agent.Input{Text: "go"})
		return out, int(children.Load()), err
	}
	if _, n, err := run(true); err == nil || n != 2 {
		t.Fatalf("first run: %d children, %v; want 2 and a failure", n, err)
	}
	out, n, err := run(false)
	if err != nil || n != 1 || out.ChildUsage.Requests != 2 || out.Earlier.Requests != 1 {
		t.Fatalf("resumed run: %d children ran, child usage %+v (%+v earlier), %v; want only the unfinished one run, and both counted", n, out.ChildUsage, out.Earlier, err)
	}
}

func TestJournalWriteFailuresEndTheTurnAndResumeRunsTheRest(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "deputy.db")
	b, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fb := &flaky{Backend: b}
	fb.n.Store(2)
	st, err := store.New(fb)
	if err != nil {
		t.Fatal(err)
	}
	j, err := st.Journal(ctx, "turn")
	if err != nil {
		t.Fatal(err)
	}
	lead, first := fanOut(t, 0, nil)
	if _, err := lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"}); !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "resume") {
		t.Fatalf("a turn whose journal writes fail: %v, want the store's error saying to resume", err)
	}
	st.Close()

	st = openStore(t, path)
	j, err = st.Journal(ctx, "turn")
	if err != nil {
		t.Fatal(err)
	}
	recorded := finishedCalls(j, 100)
	if recorded == 0 {
		// Every worker's answer can survive (the failed writes were the
		// lead's records of its calls), but not none.
		t.Fatalf("%d entries survived every other failed write, want some", recorded)
	}
	lead, workers := fanOut(t, 0, nil)
	out, err := lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	// Every worker was paid for in the first run, and those not recorded
	// again now. What a worker that failed paid for is recorded apart, so
	// that the resumed run counts it too, unless the failing store refused
	// that record as well: the turn counts each worker once at least, and
	// never more than the models billed.
	billed := first.Load() + workers.Load()
	if workers.Load() != 100-recorded || out.ChildUsage.Requests < 100 || out.ChildUsage.Requests > billed || out.Earlier.Requests < recorded {
		t.Fatalf("resume ran %d workers (usage %d requests, %d earlier), want the %d not recorded run, and between 100 and the %d billed counted", workers.Load(), out.ChildUsage.Requests, out.Earlier.Requests, 100-recorded, billed)
	}
}

func TestStoredExpertFollowsARecreatedConversation(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "deputy.db")
	st := openStore(t, path)
	var seen atomic.Value
	p := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		seen.Store(fmt.Sprint(req.Messages))
		return provider.Response{Message: provider.AssistantMessage("ok")}, nil
	})
	ex := storedExpert(t, p, st)
	if _, err := callTool(ctx, ex, "c", `{"task":"mine"}`); err != nil {
		t.Fatal(err)
	}
	// Another process deletes the memory and starts it again: version 1
	// again, with other content.
	if err := st.Delete(ctx, "expert"); err != nil {
		t.Fatal(err)
	}
	other := storedExpert(t, (&echo{}).provider(), openStore(t, path))
	if _, err := callTool(ctx, other, "c", `{"task":"theirs"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := callTool(ctx, ex, "c", `{"task":"next"}`); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]provider.Message{provider.UserMessage("theirs"), provider.AssistantMessage("A:theirs"), provider.UserMessage("next")})
	if got := seen.Load(); got != want {
		t.Fatalf("the model saw\n%s\nwant\n%s", got, want)
	}
}

// A lead whose model decides differently each time it is asked, as a real
// model does, resumes the same decisions: the loop journals its answers.
func TestJournaledLeadReplaysItsDecisions(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "deputy.db"))
	var leadCalls, workerCalls atomic.Int64
	var salt atomic.Int64
	salt.Store(1000)
	leadModel := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		leadCalls.Add(1)
		turns := 0
		for _, m := range req.Messages {
			if m.Role == provider.RoleTool {
				turns++
			}
		}
		if turns == 5 {
			return provider.Response{Message: provider.AssistantMessage("all five done"), Usage: provider.Usage{Requests: 1}}, nil
		}
		// A task name the model would not repeat.
		task := fmt.Sprintf(`{"task":"step %d, variant %d"}`, turns, salt.Add(1))
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: fmt.Sprint("call-", salt.Load()), Name: "worker", Arguments: []byte(task)}),
			Usage: provider.Usage{Requests: 1}}, nil
	})
	run := func(crashAt int64) (agent.Output, error) {
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		child := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			if workerCalls.Add(1) == crashAt {
				cancel()
				return provider.Response{}, ctx.Err()
			}
			return provider.Response{Message: provider.AssistantMessage("did " + req.Messages[0].Content), Usage: provider.Usage{Requests: 1}}, nil
		})
		worker := must(FromFactory("worker", "Does one step.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(child, agent.WithName("worker"))
		}, WithInputFromArgs(argsTask)))(t)
		lead := newReact(t, leadModel, agent.WithName("lead"), agent.WithTools(worker))
		j, err := st.Journal(ctx, "decisions")
		if err != nil {
			t.Fatal(err)
		}
		return lead.Run(agent.WithJournal(rctx, j), agent.Input{Text: "go"})
	}
	if _, err := run(4); err == nil {
		t.Fatal("the first run was meant to stop at the fourth worker")
	}
	if leadCalls.Load() != 4 || workerCalls.Load() != 4 {
		t.Fatalf("first run: %d lead calls, %d worker calls; want 4 and 4", leadCalls.Load(), workerCalls.Load())
	}
	leadCalls.Store(0)
	workerCalls.Store(0)
	out, err := run(0)
	if err != nil {
		t.Fatal(err)
	}
	// Replayed: the lead's first four answers and three workers. Run: the
	// fourth and fifth workers, the lead's last two answers.
	if leadCalls.Load() != 2 || workerCalls.Load() != 2 {
		t.Fatalf("resumed run: %d lead calls, %d worker calls; want 2 and 2", leadCalls.Load(), workerCalls.Load())
	}
	// It reports the whole turn: six lead answers and five workers, seven
	// of them replayed.
	if out.Usage.Requests != 6 || out.ChildUsage.Requests != 5 || out.Earlier.Requests != 7 {
		t.Fatalf("resumed run counted %+v own, %+v child usage, %+v earlier; want the whole turn, and what the first run spent as earlier", out.Usage, out.ChildUsage, out.Earlier)
	}
	var steps []string
	for _, m := range out.Messages {
		if m.Role == provider.RoleTool {
			steps = append(steps, m.Content)
		}
	}
	for i, s := range steps {
		if !strings.HasPrefix(s, fmt.Sprintf("did step %d, variant %d", i, 1001+i)) {
			t.Fatalf("step %d answered %q: the resumed lead did not keep its first decisions (%v)", i, s, steps)
		}
	}
}

// finishedCalls counts the workers of fanOut's lead whose model answer
// the journal holds: the work a resumed turn must not pay for again,
// whether or not the lead's call had recorded the worker's result.
func finishedCalls(j *store.Journal, n int) int64 {
	var got int64
	for i := range n {
		call := "run.lead.0/m1/c" + strconv.Itoa(i)
		worker := stored.New(j).Child(call).Key("worker", []byte(fmt.Sprintf(`{"task":"task %d"}`, i)))
		_, done := j.Lookup(call)
		_, answered := j.Lookup(worker + "/run.worker.0/m1")
		if done || answered {
			got++
		}
	}
	return got
}
