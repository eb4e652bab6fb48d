package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A lead's jobs outlive its turn on a real server, as with
// subagent.WithJobsAcrossTurns in process: its first turn starts a quick
// job and a slow one and ends; the quick one finishes between turns, and
// the worker is replaced by another; the second turn is told of it once
// and sends the slow one a message; the third waits for the slow one and
// reads its answer, the message heard once. Every side effect runs once,
// no model answer is asked for twice, and what the three turns report
// spending is what the model billed — with models that name their calls
// afresh, not at all, or from call_0.
func TestJobsOutliveTheirTurn(t *testing.T) {
	inEachIDMode(t, jobsOutliveTheirTurn)
}

func jobsOutliveTheirTurn(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const (
		turn1, turn2, turn3 = "start the survey", "check in", "collect the rivers"
		quick, slow, steer  = "count the birds", "map the rivers", "also the lakes"
	)
	var (
		n                   atomic.Int64
		mu                  sync.Mutex
		asked               = map[string]int{} // model calls by task and results seen
		seen                = map[string]string{}
		recorded, holds     atomic.Int64
		stoppedBefore, held atomic.Int64
	)
	waiting := make(chan struct{})
	var waitOnce sync.Once
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		task := firstUserOf(req)
		var users []string
		for _, msg := range req.Messages {
			if msg.Role == provider.RoleUser {
				users = append(users, msg.Content)
			}
		}
		mu.Lock()
		asked[fmt.Sprintf("%s/%d", task, len(rs))]++
		if len(rs) == 0 {
			seen[task] = strings.Join(users, "\n---\n")
		}
		mu.Unlock()
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		switch task {
		case quick:
			if len(rs) == 0 {
				return call("record", `{}`)
			}
			return provider.AssistantMessage("birds: 12"), nil
		case slow:
			if len(rs) == 0 {
				return provider.AssistantMessage("mapping", provider.ToolCall{ID: id(n.Add(1), 0), Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
			}
			heard := 0
			for _, u := range users {
				heard += strings.Count(u, steer)
			}
			return provider.AssistantMessage(fmt.Sprintf("rivers mapped, %q heard %d times", steer, heard)), nil
		case turn1:
			if len(rs) == 0 {
				return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + quick + `","background":true}`)},
					provider.ToolCall{ID: id(n.Add(1), 1), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + slow + `","background":true}`)}), nil
			}
			return provider.AssistantMessage("started " + jobIDOf(rs[0]) + " and " + jobIDOf(rs[1])), nil
		case turn2:
			if len(rs) == 0 {
				return call(subagent.JobsToolName, `{"action":"send","job_id":"job_2","message":"`+steer+`"}`)
			}
			return provider.AssistantMessage("sent: " + rs[0]), nil
		case turn3:
			if len(rs) == 0 {
				waitOnce.Do(func() { close(waiting) })
				return call(subagent.JobsToolName, `{"action":"wait","job_id":"job_2","timeout_seconds":300}`)
			}
			return provider.AssistantMessage("lead: " + rs[0]), nil
		}
		return provider.Message{}, fmt.Errorf("unexpected task %q", task)
	}}
	record := tool.Must(tool.New("record", "Records.", func(context.Context, struct{}) (string, error) {
		recorded.Add(1)
		return "recorded", nil
	}))
	holding, release := make(chan struct{}), make(chan struct{})
	regBefore, err := tool.NewRegistry(record, blocking(t, "hold", &holds, &stoppedBefore, holding))
	if err != nil {
		t.Fatal(err)
	}
	regAfter, err := tool.NewRegistry(record, tool.Must(tool.New("hold", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		held.Add(1)
		select {
		case <-release:
			return "held", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-thread-jobs-%d", time.Now().UnixNano())
	w1 := worker.New(c, queue, worker.Options{})
	Register(w1, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: regBefore})
	if err := w1.Start(); err != nil {
		t.Fatal(err)
	}
	lead := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"record", "hold"}, Spawn: true, Background: true, JobsAcrossTurns: true}}
	tctx := agent.WithOwner(agent.WithThread(ctx, "thread-"+queue), "ann")
	thread := ThreadWorkflowID("ann", "thread-"+queue)
	var spent provider.Usage

	out1, err := lead.Run(tctx, agent.Input{Text: turn1})
	if err != nil {
		t.Fatal(err)
	}
	spent = spent.Add(out1.TotalUsage())
	if out1.Answer != "started job_1 and job_2" {
		t.Errorf("the first turn answered %q, want both jobs started", out1.Answer)
	}
	// The quick job finishes between turns, the slow one holds on.
	for {
		d, err := describe(ctx, c, thread+"/job_1")
		if err == nil && d.WorkflowExecutionInfo.Status == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			break
		}
		if err == nil && d.WorkflowExecutionInfo.Status != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			t.Fatalf("the quick job ended %v, want it completed after its turn ended", d.WorkflowExecutionInfo.Status)
		}
		if ctx.Err() != nil {
			t.Fatalf("the quick job did not finish between turns: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("the slow job never reached its step that holds on")
	}
	w1.Stop()
	w2 := worker.New(c, queue, worker.Options{})
	Register(w2, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: regAfter})
	if err := w2.Start(); err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()

	out2, err := lead.Run(tctx, agent.Input{Text: turn2})
	if err != nil {
		t.Fatal(err)
	}
	spent = spent.Add(out2.TotalUsage())
	mu.Lock()
	told := seen[turn2]
	mu.Unlock()
	if strings.Count(told, "Background job job_1 (subagent), started in an earlier turn, has ended (done). Its result:\nbirds: 12") != 1 || strings.Contains(told, "job_2") {
		t.Errorf("the second turn was told:\n%s\nwant the quick job's end once (subagent.DefaultJobNote), nothing of the slow one", told)
	}
	var r subagent.Receipt
	if err := json.Unmarshal([]byte(strings.TrimPrefix(out2.Answer, "sent: ")), &r); err != nil || r.JobID != "job_2" || r.State != subagent.MessageQueued {
		t.Errorf("the second turn answered %q, want the message's receipt, queued for job_2 (%v)", out2.Answer, err)
	}

	go func() {
		select {
		case <-waiting: // the third turn waits: the slow job goes on
		case <-ctx.Done():
		}
		close(release)
	}()
	out3, err := lead.Run(tctx, agent.Input{Text: turn3})
	if err != nil {
		t.Fatal(err)
	}
	spent = spent.Add(out3.TotalUsage())
	if want := fmt.Sprintf("lead: rivers mapped, %q heard 1 times", steer); out3.Answer != want {
		t.Errorf("the third turn answered %q, want %q", out3.Answer, want)
	}
	mu.Lock()
	told = seen[turn3]
	calls := map[string]int{}
	for k, v := range asked {
		calls[k] = v
	}
	mu.Unlock()
	if strings.Contains(told, "Background job") {
		t.Errorf("the third turn was told:\n%s\nwant nothing: the quick job was told of once, and the slow one still ran", told)
	}
	if recorded.Load() != 1 || holds.Load() != 1 || stoppedBefore.Load() != 1 || held.Load() != 1 {
		t.Errorf("recorded %d times, held on %d times before the restart (%d ended by it) and %d after; want 1, 1, 1, 1",
			recorded.Load(), holds.Load(), stoppedBefore.Load(), held.Load())
	}
	for k, v := range calls {
		if v != 1 {
			t.Errorf("the model was asked %d times for %s, want once", v, k)
		}
	}
	total, billed := m.total()
	if total != 10 || spent != billed {
		t.Errorf("%d model calls billing %+v, the turns reported %+v; want 10 (2 each turn's, 2 each job's), each counted once", total, billed, spent)
	}
}

// A thread's jobs are bounded across its turns: a turn that finds as
// many jobs of earlier turns alive as Spec.MaxBackground starts no more,
// and a job that no turn collects ends by itself at Spec.JobTime, its
// thread away, with a partial report and what it spent, which the
// thread's next turn is told of and counts.
func TestThreadJobsAreBounded(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const turn1, turn2, turn3, long = "start the count", "start another", "anything new?", "count the stars"
	var runs, stopped atomic.Int64
	blocked := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]string{}
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		task := firstUserOf(req)
		if len(rs) == 0 {
			var users []string
			for _, msg := range req.Messages {
				if msg.Role == provider.RoleUser {
					users = append(users, msg.Content)
				}
			}
			mu.Lock()
			seen[task] = strings.Join(users, "\n---\n")
			mu.Unlock()
		}
		spawn := provider.AssistantMessage("", provider.ToolCall{ID: "c", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + long + `","background":true}`)})
		switch {
		case task == long:
			return provider.AssistantMessage("counting", provider.ToolCall{ID: "c", Name: "block", Arguments: json.RawMessage(`{}`)}), nil
		case len(rs) == 0 && (task == turn1 || task == turn2):
			return spawn, nil
		case len(rs) == 0:
			return provider.AssistantMessage("nothing to do"), nil
		}
		return provider.AssistantMessage(task + ": " + rs[0]), nil
	}}
	reg, err := tool.NewRegistry(blocking(t, "block", &runs, &stopped, blocked))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-thread-bounds-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const jobTime = 3 * time.Second
	lead := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"block"}, Spawn: true, Background: true,
		JobsAcrossTurns: true, MaxBackground: 1, JobTime: jobTime}}
	tctx := agent.WithThread(ctx, "thread-"+queue)
	var spent provider.Usage
	out1, err := lead.Run(tctx, agent.Input{Text: turn1})
	if err != nil {
		t.Fatal(err)
	}
	spent = spent.Add(out1.TotalUsage())
	<-blocked
	// Between turns no run of the thread takes an update: Go code that
	// sends to the job, or cancels it, is told to act in a turn.
	thread := ThreadWorkflowID("bob", "thread-"+queue)
	if _, err := SendToJob(ctx, c, thread, "job_1", "hello"); err == nil || !strings.Contains(err.Error(), "next turn") {
		t.Errorf("SendToJob between turns: %v, want an error that says to act in the next turn", err)
	}
	if _, err := CancelJob(ctx, c, thread, "job_1"); err == nil || !strings.Contains(err.Error(), "next turn") {
		t.Errorf("CancelJob between turns: %v, want an error that says to act in the next turn", err)
	}
	out2, err := lead.Run(tctx, agent.Input{Text: turn2})
	if err != nil {
		t.Fatal(err)
	}
	spent = spent.Add(out2.TotalUsage())
	if !strings.Contains(out2.Answer, subagent.ErrMaxBackground.Error()) || !strings.Contains(out2.Answer, "1 are running") {
		t.Errorf("the second turn answered %q, want its spawn refused: the thread's job of the first turn is the most it may have alive", out2.Answer)
	}
	// No turn comes: the job ends by itself at its time.
	job := ThreadWorkflowID("", "thread-"+queue) + "/job_1"
	for {
		d, err := describe(ctx, c, job)
		if err != nil {
			t.Fatal(err)
		}
		if st := d.WorkflowExecutionInfo.Status; st != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			if st != enums.WORKFLOW_EXECUTION_STATUS_FAILED {
				t.Errorf("the job ended %v, want failed past its time", st)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the job runs on past its time")
		}
		time.Sleep(100 * time.Millisecond)
	}
	out3, err := lead.Run(tctx, agent.Input{Text: turn3})
	if err != nil {
		t.Fatal(err)
	}
	spent = spent.Add(out3.TotalUsage())
	mu.Lock()
	told := seen[turn3]
	mu.Unlock()
	if !strings.Contains(told, "Background job job_1 (subagent), started in an earlier turn, has ended (failed)") || !strings.Contains(told, "ran past its time") ||
		!strings.Contains(told, "counting") {
		t.Errorf("the third turn was told:\n%s\nwant the job's end past its time, with its partial report (its last words)", told)
	}
	calls, billed := m.total()
	if calls != 6 || spent != billed {
		t.Errorf("%d model calls billing %+v, the turns reported %+v; want 6 (2 each of the first two turns, 1 the third's, 1 the job's), the job's counted by the turn told of it", calls, billed, spent)
	}
}

// A turn acts on a job an earlier turn of its thread started, by the id
// that turn was given: its status says it runs, with its step and last
// words, and a cancel ends its workflow and its tool call and hands back
// its partial report and what it spent, counted once.
func TestTurnActsOnAnEarlierTurnsJob(t *testing.T) {
	inEachIDMode(t, actsOnEarlierJob)
}

func actsOnEarlierJob(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const turn1, turn2, long = "start the count", "stop the count", "count the stars"
	var n, runs, stopped atomic.Int64
	blocked := make(chan struct{})
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		switch task := firstUserOf(req); {
		case task == long:
			return provider.AssistantMessage("counting", provider.ToolCall{ID: id(n.Add(1), 0), Name: "block", Arguments: json.RawMessage(`{}`)}), nil
		case task == turn1 && len(rs) == 0:
			return call(SpawnToolName, `{"task":"`+long+`","background":true}`)
		case task == turn2 && len(rs) == 0:
			return call(subagent.JobsToolName, `{"action":"status","job_id":"job_1"}`)
		case task == turn2 && len(rs) == 1:
			return call(subagent.JobsToolName, `{"action":"cancel","job_id":"job_1"}`)
		}
		return provider.AssistantMessage(strings.Join(rs, "\n===\n")), nil
	}}
	reg, err := tool.NewRegistry(blocking(t, "block", &runs, &stopped, blocked))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-thread-act-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	lead := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"block"}, Spawn: true, Background: true, JobsAcrossTurns: true}}
	tctx := agent.WithOwner(agent.WithThread(ctx, "thread-"+queue), "bob")
	out1, err := lead.Run(tctx, agent.Input{Text: turn1})
	if err != nil {
		t.Fatal(err)
	}
	<-blocked
	// Between turns no run of the thread takes an update: Go code that
	// sends to the job, or cancels it, is told to act in a turn.
	thread := ThreadWorkflowID("bob", "thread-"+queue)
	if _, err := SendToJob(ctx, c, thread, "job_1", "hello"); err == nil || !strings.Contains(err.Error(), "next turn") {
		t.Errorf("SendToJob between turns: %v, want an error that says to act in the next turn", err)
	}
	if _, err := CancelJob(ctx, c, thread, "job_1"); err == nil || !strings.Contains(err.Error(), "next turn") {
		t.Errorf("CancelJob between turns: %v, want an error that says to act in the next turn", err)
	}
	out2, err := lead.Run(tctx, agent.Input{Text: turn2})
	if err != nil {
		t.Fatal(err)
	}
	status, report, _ := strings.Cut(out2.Answer, "\n===\n")
	var st subagent.JobStatus
	if err := json.Unmarshal([]byte(status), &st); err != nil || st.ID != "job_1" || st.State != subagent.JobRunning || st.Task != long || st.LastWords != "counting" {
		t.Errorf("the status of the earlier turn's job read %q (%v), want job_1 running, with its task and last words", status, err)
	}
	if !strings.Contains(report, "cancelled at step 1") || !strings.Contains(report, "its last words:\ncounting") {
		t.Errorf("the cancel of the earlier turn's job read %q, want its partial report", report)
	}
	d, err := describe(ctx, c, ThreadWorkflowID("bob", "thread-"+queue)+"/job_1")
	if err != nil {
		t.Fatal(err)
	}
	if st := d.WorkflowExecutionInfo.Status; st != enums.WORKFLOW_EXECUTION_STATUS_CANCELED {
		t.Errorf("the job's workflow is %v, want cancelled", st)
	}
	for stopped.Load() == 0 && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	if runs.Load() != 1 || stopped.Load() != 1 {
		t.Errorf("the job's tool ran %d times, %d of them stopped; want one, stopped by the cancel", runs.Load(), stopped.Load())
	}
	calls, billed := m.total()
	if spent := out1.TotalUsage().Add(out2.TotalUsage()); calls != 6 || spent != billed {
		t.Errorf("%d model calls billing %+v, the turns reported %+v; want 6 (2 the first turn's, 3 the second's, 1 the job's), each counted once", calls, billed, spent)
	}
}

// A job of a thread that asks a person while no turn of its thread runs
// waits for the next turn, which hears its question when it asks the job
// where it stands: the turn hands it on, attributed to the job's
// workflow, as any question of its tree, and the job, answered, pays
// once and the turn's wait reads its answer.
func TestThreadJobAsksBetweenTurns(t *testing.T) {
	inEachIDMode(t, jobAsksBetweenTurns)
}

func jobAsksBetweenTurns(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const turn1, turn2, bill = "start paying", "settle up", "pay the bill"
	var paid, n, jobCalls atomic.Int64
	pay := tool.RequireApproval(tool.Must(tool.New("pay", "Pays.", func(context.Context, struct{}) (string, error) {
		paid.Add(1)
		return "paid", nil
	})), "moves money", 0)
	reg, err := tool.NewRegistry(pay)
	if err != nil {
		t.Fatal(err)
	}
	turnOver := make(chan struct{})
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		task := firstUserOf(req)
		switch {
		case task == bill && len(rs) == 0:
			select { // it asks once its turn is over
			case <-turnOver:
			case <-ctx.Done():
				return provider.Message{}, ctx.Err()
			}
			jobCalls.Add(1)
			return call("pay", `{}`)
		case task == bill:
			return provider.AssistantMessage("bill: " + rs[0]), nil
		case task == turn1 && len(rs) == 0:
			return call(SpawnToolName, `{"task":"`+bill+`","background":true}`)
		case task == turn2 && len(rs) == 0:
			return call(subagent.JobsToolName, `{"action":"wait","job_id":"job_1","timeout_seconds":60}`)
		}
		return provider.AssistantMessage(task + ": " + rs[0]), nil
	}}
	queue := fmt.Sprintf("deputy-thread-ask-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	lead := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay"}, Spawn: true, Background: true, JobsAcrossTurns: true}}
	tctx := agent.WithThread(ctx, "thread-"+queue)
	thread := ThreadWorkflowID("", "thread-"+queue)
	out1, err := lead.Run(tctx, agent.Input{Text: turn1})
	if err != nil {
		t.Fatal(err)
	}
	close(turnOver)
	for jobCalls.Load() == 0 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the job asks, and no turn hears it
	_, err = lead.Run(tctx, agent.Input{Text: turn2})
	var asked *tool.Interrupted
	if !errors.As(err, &asked) || len(asked.Interrupts) != 1 || asked.Interrupts[0].SubagentRunID != thread+"/job_1" {
		t.Fatalf("the second turn ended with %v, want the job's question, attributed to its workflow", err)
	}
	// The turn waits on: the person answers the tree's question.
	pending, err := Pending(ctx, c, thread)
	if err != nil || len(pending) != 1 || pending[0].SubagentRunID != thread+"/job_1" {
		t.Fatalf("the thread's turn waits on %+v (%v), want the job's one question", pending, err)
	}
	if err := Answer(ctx, c, thread, tool.Answer{InterruptID: pending[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}); err != nil {
		t.Fatal(err)
	}
	var out2 RunOutput
	if err := c.GetWorkflow(ctx, thread, "").Get(ctx, &out2); err != nil {
		t.Fatal(err)
	}
	if want := turn2 + ": bill: paid"; out2.Answer != want || paid.Load() != 1 {
		t.Errorf("the second turn answered %q, paid %d times; want %q, paid once", out2.Answer, paid.Load(), want)
	}
	calls, billed := m.total()
	if spent := out1.TotalUsage().Add(out2.TotalUsage()); calls != 6 || spent != billed {
		t.Errorf("%d model calls billing %+v, the turns reported %+v; want 6, each counted once", calls, billed, spent)
	}
}
