package temporal

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Tests against a real Temporal server read its address from
// DEPUTY_TEST_TEMPORAL (host:port) and its namespace from
// DEPUTY_TEST_TEMPORAL_NAMESPACE; .ci/temporal.sh builds, starts and stops
// the development server (internal/devserver) and sets both.
func serverAddr(t *testing.T) (hostPort, namespace string) {
	t.Helper()
	hostPort = os.Getenv("DEPUTY_TEST_TEMPORAL")
	if hostPort == "" {
		t.Skip("needs a Temporal server: set DEPUTY_TEST_TEMPORAL=host:port (and DEPUTY_TEST_TEMPORAL_NAMESPACE); .ci/temporal.sh starts one")
	}
	return hostPort, os.Getenv("DEPUTY_TEST_TEMPORAL_NAMESPACE")
}

const (
	scaleChildren = 1000
	childDelay    = 20 * time.Millisecond
	// approvalPart is the task of the child that must be approved.
	approvalPart = "part 7"
)

// callLog is the scripted provider of the scale test's worker processes.
// Each child call sleeps 20 ms and appends "workflow activity attempt
// tokens" to a file shared by the workers, so that the test can count the
// model calls of every child across processes.
type callLog struct {
	mu sync.Mutex
	f  *os.File
}

func (l *callLog) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	var msg provider.Message
	task := lastUser(req)
	switch {
	case task == approvalPart && req.Messages[len(req.Messages)-1].Role != provider.RoleTool:
		// One child pays, which a person must approve first.
		msg = provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"amount":7}`)})
	case strings.HasPrefix(task, "part "):
		select {
		case <-time.After(childDelay):
		case <-ctx.Done():
			return provider.Response{}, ctx.Err()
		}
		msg = provider.AssistantMessage("done " + strings.TrimPrefix(task, "part "))
	case req.Messages[len(req.Messages)-1].Role == provider.RoleTool:
		n := 0
		for _, m := range req.Messages {
			if m.Role == provider.RoleTool && strings.HasPrefix(m.Content, "done ") {
				n++
			}
		}
		msg = provider.AssistantMessage(fmt.Sprintf("collected %d", n))
	default:
		msg = spawnCalls(scaleChildren)
	}
	u := fake.Usage(req, msg)
	info := activity.GetInfo(ctx)
	line := fmt.Sprintf("%s %s %d %d %d\n", info.WorkflowExecution.ID, info.ActivityID, info.Attempt, u.Tokens(), u.Requests)
	l.mu.Lock()
	_, err := l.f.WriteString(line)
	l.mu.Unlock()
	if err != nil {
		return provider.Response{}, err
	}
	return provider.Response{Message: msg, Usage: u}, nil
}

// TestScaleWorkerProcess is the body of a worker process the scale test
// starts; it runs only when DEPUTY_TEMPORAL_WORKER_LOG names the call log.
func TestScaleWorkerProcess(t *testing.T) {
	logPath := os.Getenv("DEPUTY_TEMPORAL_WORKER_LOG")
	if logPath == "" {
		t.Skip("runs only as a worker process of TestScaleFanOutSurvivesAKilledWorker")
	}
	hostPort, ns := serverAddr(t)
	f, err := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := Dial(context.Background(), hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := worker.New(c, os.Getenv("DEPUTY_TEMPORAL_QUEUE"), worker.Options{
		MaxConcurrentActivityExecutionSize:     1000,
		MaxConcurrentWorkflowTaskExecutionSize: 200,
	})
	pay, err := tool.New("pay", "Pays.", func(ctx context.Context, in struct {
		Amount int `json:"amount"`
	}) (string, error) {
		// Recorded in the call log, where the test counts it.
		if _, err := f.WriteString("paid\n"); err != nil {
			return "", err
		}
		return "paid", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry(tool.RequireApproval(pay, "moves money", 0))
	if err != nil {
		t.Fatal(err)
	}
	Register(w, &Runtime{Providers: map[string]provider.Provider{"fake": &callLog{f: f}}, Tools: reg})
	if err := w.Run(worker.InterruptCh()); err != nil {
		t.Fatal(err)
	}
}

type logLine struct {
	workflow, activity string
	attempt            int
	tokens, requests   int64
}

func readLog(t *testing.T, path string) []logLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []logLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Fields(sc.Text())
		if len(p) != 5 {
			continue // a line cut by the SIGKILL
		}
		a, _ := strconv.Atoi(p[2])
		tok, _ := strconv.ParseInt(p[3], 10, 64)
		req, _ := strconv.ParseInt(p[4], 10, 64)
		lines = append(lines, logLine{p[0], p[1], a, tok, req})
	}
	return lines
}

func TestScaleFanOutSurvivesAKilledWorker(t *testing.T) {
	hostPort, ns := serverAddr(t)
	dir := t.TempDir()
	logPath := dir + "/calls.log"
	queue := fmt.Sprintf("deputy-scale-%d", time.Now().UnixNano())
	var workers []*exec.Cmd
	for i := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestScaleWorkerProcess$", "-test.timeout=30m")
		cmd.Env = append(os.Environ(), "DEPUTY_TEMPORAL_WORKER_LOG="+logPath, "DEPUTY_TEMPORAL_QUEUE="+queue)
		out, err := os.Create(fmt.Sprintf("%s/worker%d.out", dir, i))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		workers = append(workers, cmd)
	}
	t.Cleanup(func() {
		for _, w := range workers {
			_ = w.Process.Kill()
			_ = w.Wait()
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// On failure, say why: the workers' output lives in the TempDir,
	// which goes when the test ends, and the lead's workflow tasks that
	// failed or timed out are in its history.
	defer func() {
		if t.Failed() {
			explainScaleFailure(t, c, queue+"-lead", dir, len(workers))
		}
	}()
	spec := Spec{Name: "lead", Provider: "fake", Spawn: true, Tools: []string{"pay"}, Parallelism: 250, ActivityTimeout: time.Minute}
	start := time.Now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue + "-lead", TaskQueue: queue}, AgentWorkflowName,
		RunInput{Spec: spec, Text: "split the work"})
	if err != nil {
		t.Fatal(err)
	}
	// Kill the first worker once about a third of the children answered.
	killed := false
	for !killed && time.Since(start) < 10*time.Minute {
		time.Sleep(50 * time.Millisecond)
		if b, _ := os.ReadFile(logPath); strings.Count(string(b), "\n") >= scaleChildren/3 {
			if err := workers[0].Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = true
			t.Logf("worker 1 killed with SIGKILL after %v", time.Since(start).Round(time.Millisecond))
		}
	}
	// One child waits for a person; answer it, however long it waited
	// and whichever worker it ran on.
	var pending []tool.Interrupt
	for len(pending) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the paying child's question never reached the top of the tree")
		}
		time.Sleep(100 * time.Millisecond)
		if pending, err = Pending(ctx, c, queue+"-lead"); err != nil {
			// The lead's workflow may have been cached on the killed
			// worker: its query fails until another worker takes it.
			t.Logf("asking the lead what it waits on: %v; asking again", err)
		}
	}
	if err := Answer(ctx, c, queue+"-lead", tool.Answer{InterruptID: pending[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	wall := time.Since(start)
	if b, _ := os.ReadFile(logPath); strings.Count(string(b), "paid\n") != 1 {
		t.Errorf("the approved payment was made %d times, want once", strings.Count(string(b), "paid\n"))
	}
	if out.Answer != fmt.Sprintf("collected %d", scaleChildren) {
		t.Fatalf("answer %q", out.Answer)
	}
	lines := readLog(t, logPath)
	type key struct{ wf, act string }
	attempts := map[key]map[int]int{}
	usage := map[key]logLine{}
	for _, l := range lines {
		k := key{l.workflow, l.activity}
		if attempts[k] == nil {
			attempts[k] = map[int]int{}
		}
		attempts[k][l.attempt]++
		usage[k] = l
	}
	retried := 0
	childWorkflows := map[string]bool{}
	var tokens, requests int64
	for k, byAttempt := range attempts {
		if strings.Contains(k.wf, SpawnToolName) {
			childWorkflows[k.wf] = true
		}
		for a, n := range byAttempt {
			if n > 1 {
				t.Errorf("%s activity %s attempt %d ran its model %d times: a completed activity ran again", k.wf, k.act, a, n)
			}
			if a > 1 {
				retried++
			}
		}
		tokens += usage[k].tokens
		requests += usage[k].requests
	}
	if children := len(childWorkflows); children != scaleChildren {
		t.Errorf("%d children called their model, want %d", children, scaleChildren)
	}
	if got := out.TotalUsage(); got.Tokens() != tokens || got.Requests != requests {
		t.Errorf("lead usage %v, the fake handed out %d tokens in %d requests", got, tokens, requests)
	}
	t.Logf("temporal: %d children on 2 workers (one killed): %v wall, %d model calls retried after the kill", scaleChildren, wall.Round(time.Millisecond), retried)
	t.Logf("in process, the same fan-out: %v wall", inProcessFanOut(t).Round(time.Millisecond))
}

// explainScaleFailure logs what a failed scale test needs to be
// understood: the tail of each worker process's output and the lead's
// workflow tasks that failed or timed out, with how long its tasks took.
func explainScaleFailure(t *testing.T, c client.Client, lead, dir string, workers int) {
	t.Helper()
	for i := range workers {
		b, err := os.ReadFile(fmt.Sprintf("%s/worker%d.out", dir, i))
		if err != nil {
			t.Logf("worker %d output: %v", i+1, err)
			continue
		}
		if len(b) > 8<<10 {
			b = b[len(b)-8<<10:]
		}
		t.Logf("worker %d output (tail):\n%s", i+1, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if d, err := describe(ctx, c, lead); err == nil {
		if p := d.GetPendingWorkflowTask(); p != nil {
			t.Logf("lead's pending workflow task: state %v, attempt %d, scheduled %v, started %v",
				p.GetState(), p.GetAttempt(), p.GetScheduledTime().AsTime().Format(time.RFC3339Nano), p.GetStartedTime().AsTime().Format(time.RFC3339Nano))
		}
	} else {
		t.Logf("describing the lead: %v", err)
	}
	it := c.GetWorkflowHistory(ctx, lead, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	startedAt := map[int64]time.Time{} // a workflow task's started event, by id
	var events, tasks int
	var longest time.Duration
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Logf("reading the lead's history: %v", err)
			return
		}
		events++
		at := e.GetEventTime().AsTime()
		took := func(started int64) string {
			if s, ok := startedAt[started]; ok {
				return at.Sub(s).Round(time.Millisecond).String()
			}
			return "?"
		}
		switch e.GetEventType() {
		case enums.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			startedAt[e.GetEventId()] = at
		case enums.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			tasks++
			if s, ok := startedAt[e.GetWorkflowTaskCompletedEventAttributes().GetStartedEventId()]; ok {
				longest = max(longest, at.Sub(s))
			}
		case enums.EVENT_TYPE_WORKFLOW_TASK_FAILED:
			a := e.GetWorkflowTaskFailedEventAttributes()
			t.Logf("lead event %d at %s: a workflow task of %s by %s failed: %v: %s", e.GetEventId(), at.Format(time.RFC3339Nano),
				took(a.GetStartedEventId()), a.GetIdentity(), a.GetCause(), a.GetFailure().GetMessage())
		case enums.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
			a := e.GetWorkflowTaskTimedOutEventAttributes()
			t.Logf("lead event %d at %s: a workflow task of %s timed out (%v)", e.GetEventId(), at.Format(time.RFC3339Nano),
				took(a.GetStartedEventId()), a.GetTimeoutType())
		}
	}
	t.Logf("lead's history: %d events, %d workflow tasks completed, the longest in %v", events, tasks, longest.Round(time.Millisecond))
}

// inProcessFanOut runs the same 1,000-child fan-out with the core's spawn
// tool in this process, for comparison.
func inProcessFanOut(t *testing.T) time.Duration {
	t.Helper()
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		task := lastUser(req)
		switch {
		case strings.Contains(task, "part "):
			time.Sleep(childDelay)
			return provider.AssistantMessage("done"), nil
		case req.Messages[len(req.Messages)-1].Role == provider.RoleTool:
			return provider.AssistantMessage("collected"), nil
		default:
			return spawnCalls(scaleChildren), nil
		}
	}}
	reg, err := tool.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subagent.NewSpawner(p, reg, subagent.WithMaxSpawns(scaleChildren), subagent.WithSpawnConcurrency(250))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(sp); err != nil {
		t.Fatal(err)
	}
	if err := reg.SetParallelism(250); err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(p, agent.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := lead.Run(context.Background(), agent.Input{Text: "split the work"})
	if err != nil {
		t.Fatal(err)
	}
	if calls, _ := p.total(); calls != scaleChildren+2 || out.Answer != "collected" {
		t.Fatalf("in process: %d calls, answer %q", calls, out.Answer)
	}
	return time.Since(start)
}

// TestInProcessFanOut checks the comparison run itself.
func TestInProcessFanOut(t *testing.T) {
	if testing.Short() {
		t.Skip("a 1,000-child fan-out")
	}
	t.Logf("in process: %d children in %v", scaleChildren, inProcessFanOut(t))
}
