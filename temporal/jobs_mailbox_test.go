package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/internal/mailbox"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// mailRun is what a lead that sends its job many messages saw: the job's
// status while every message waited, the results of the sends, the
// job's status once it had ended, and how many messages the job took.
type mailRun struct {
	before, after subagent.JobStatus
	sends         []string
	took          int
	leadCalls     int64
	jobCalls      int64
	lead          string // the lead's workflow id
}

// sendBatch is how many messages the lead of sendMany sends in one step.
const sendBatch = 100

// leadSteps is how many model calls the lead of sendMany makes to send n.
func leadSteps(n int) int64 { return leadStepsOf(n, sendBatch) }

// leadStepsOf is how many model calls the lead of sendMany makes to send
// n, batch a step.
func leadStepsOf(n, batch int) int64 { return int64(1 + (n+batch-1)/batch + 4) }

// sendMany runs on the server a lead that starts a job, sends it n
// messages, sendBatch a step, while the job's first model call waits,
// reads its status, lets the job take the messages at its next step, waits for it
// and reads its status again.
func sendMany(t *testing.T, c client.Client, id func(n int64, i int) string, n int) mailRun {
	t.Helper()
	return sendManyBy(t, c, id, n, sendBatch, worker.Options{})
}

// sendManyBy is sendMany, sending batch messages a step, on a worker
// with opts.
func sendManyBy(t *testing.T, c client.Client, id func(n int64, i int) string, n, batch int, opts worker.Options) mailRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const task = "wait for word"
	var r mailRun
	var ids, leadCalls, jobCalls atomic.Int64
	read := make(chan struct{})
	var readOnce sync.Once
	var mu sync.Mutex
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(i int, name, args string) provider.ToolCall {
			return provider.ToolCall{ID: id(ids.Add(1), i), Name: name, Arguments: json.RawMessage(args)}
		}
		if firstUserOf(req) == task {
			jobCalls.Add(1)
			if len(rs) == 0 {
				select { // it takes its messages once the lead has read its status
				case <-read:
				case <-ctx.Done():
					return provider.Message{}, ctx.Err()
				}
				return provider.AssistantMessage("", call(0, subagent.JobsToolName, `{"action":"list"}`)), nil
			}
			took := 0
			for _, msg := range req.Messages {
				if msg.Role == provider.RoleUser {
					took += strings.Count(msg.Content, "from the agent that started you:\nword ")
				}
			}
			return provider.AssistantMessage(fmt.Sprint("took ", took)), nil
		}
		leadCalls.Add(1)
		status := func(into *subagent.JobStatus) error {
			mu.Lock()
			defer mu.Unlock()
			return json.Unmarshal([]byte(rs[len(rs)-1]), into)
		}
		switch done := len(rs) - 1; {
		case len(rs) == 0:
			return provider.AssistantMessage("", call(0, SpawnToolName, `{"task":"`+task+`","background":true}`)), nil
		case done < n:
			calls := make([]provider.ToolCall, min(batch, n-done))
			for i := range calls {
				calls[i] = call(i, subagent.JobsToolName, fmt.Sprintf(`{"action":"send","job_id":"job_1","message":"word %d"}`, done+i+1))
			}
			return provider.AssistantMessage("", calls...), nil
		}
		switch len(rs) {
		case 1 + n:
			mu.Lock()
			r.sends = rs[1:]
			mu.Unlock()
			return provider.AssistantMessage("", call(0, subagent.JobsToolName, `{"action":"status","job_id":"job_1"}`)), nil
		case 2 + n:
			if err := status(&r.before); err != nil {
				return provider.Message{}, err
			}
			readOnce.Do(func() { close(read) })
			return provider.AssistantMessage("", call(0, subagent.JobsToolName, `{"action":"wait","job_id":"job_1","timeout_seconds":120}`)), nil
		case 3 + n:
			var took int
			if _, err := fmt.Sscanf(rs[len(rs)-1], "took %d", &took); err != nil {
				return provider.Message{}, fmt.Errorf("the job answered %q", rs[len(rs)-1])
			}
			mu.Lock()
			r.took = took
			mu.Unlock()
			return provider.AssistantMessage("", call(0, subagent.JobsToolName, `{"action":"status","job_id":"job_1"}`)), nil
		case 4 + n:
			if err := status(&r.after); err != nil {
				return provider.Message{}, err
			}
		}
		return provider.AssistantMessage("done"), nil
	}}
	queue := fmt.Sprintf("deputy-mail-%d", time.Now().UnixNano())
	w := worker.New(c, queue, opts)
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	r.lead = queue + "-lead"
	spec := Spec{Name: "lead", Provider: "m", Spawn: true, Background: true, MaxSteps: 30}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: r.lead, TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: spec, Text: "talk to your job"})
	if err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if out.Answer != "done" {
		t.Fatalf("the lead answered %q", out.Answer)
	}
	r.leadCalls, r.jobCalls = leadCalls.Load(), jobCalls.Load()
	return r
}

// A job's status lists the receipts of its newest 64 messages, as in
// process (mailbox.MaxReceipts), and counts the older in its
// messages_dropped: a lead that sends its job 74 while it works reads the
// newest 64, numbered 11 to 74, and 10 dropped, and after the job took
// them, each once, the same 64 delivered. (The run kept 256, and its
// status counted none dropped.)
func TestJobReceiptsBoundAsInProcess(t *testing.T) {
	inEachIDMode(t, func(t *testing.T, c client.Client, id func(n int64, i int) string) {
		const sent = mailbox.MaxReceipts + 10
		r := sendMany(t, c, id, sent)
		for i, s := range r.sends {
			if !strings.Contains(s, `"state":"queued"`) {
				t.Fatalf("send %d answered %q, want a receipt, queued", i+1, s)
			}
		}
		for _, st := range []subagent.JobStatus{r.before, r.after} {
			ms := st.Messages
			if len(ms) != mailbox.MaxReceipts || st.Dropped != sent-mailbox.MaxReceipts || ms[0].Seq != sent-mailbox.MaxReceipts+1 || ms[len(ms)-1].Seq != sent {
				t.Errorf("the status (%s) lists %d receipts (%+v … %+v), %d dropped; want the newest %d, numbered %d to %d, %d dropped",
					st.State, len(ms), first(ms), last(ms), st.Dropped, mailbox.MaxReceipts, sent-mailbox.MaxReceipts+1, sent, sent-mailbox.MaxReceipts)
			}
		}
		for _, m := range r.after.Messages {
			if m.State != subagent.MessageDelivered || m.Step != 2 {
				t.Errorf("after the job ended, receipt %+v, want delivered before step 2", m)
				break
			}
		}
		if r.took != sent || r.leadCalls != leadSteps(sent) || r.jobCalls != 2 {
			t.Errorf("the job took %d messages; the lead's model answered %d times, the job's %d; want %d, %d and 2", r.took, r.leadCalls, r.jobCalls, sent, leadSteps(sent))
		}
	})
}

// A job takes at most 1,024 messages in its life, as in process
// (mailbox.MaxMessages): the 1,025th send is refused with the error in
// process says so, and none of the 1,024 is lost: the job takes each
// once. (Every send was let in.)
func TestJobMessagesBoundAsInProcess(t *testing.T) {
	hostPort, ns := serverAddr(t)
	c, err := Dial(context.Background(), hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const sent = mailbox.MaxMessages + 1
	r := sendMany(t, c, policyIDModes[0].id, sent)
	for i, s := range r.sends[:sent-1] {
		if !strings.Contains(s, `"state":"queued"`) {
			t.Fatalf("send %d answered %q, want a receipt, queued", i+1, s)
		}
	}
	if got, want := r.sends[sent-1], fmt.Sprintf("job job_1: %v", mailbox.ErrTooMany); got != want {
		t.Errorf("the %dth send answered %q, want %q", sent, got, want)
	}
	if r.took != mailbox.MaxMessages || r.after.Dropped != mailbox.MaxMessages-mailbox.MaxReceipts || len(r.after.Messages) != mailbox.MaxReceipts {
		t.Errorf("the job took %d messages, its status lists %d and counts %d dropped; want %d taken, %d listed, %d dropped",
			r.took, len(r.after.Messages), r.after.Dropped, mailbox.MaxMessages, mailbox.MaxReceipts, mailbox.MaxMessages-mailbox.MaxReceipts)
	}
	if r.leadCalls != leadSteps(sent) || r.jobCalls != 2 {
		t.Errorf("the lead's model answered %d times, the job's %d; want %d and 2", r.leadCalls, r.jobCalls, leadSteps(sent))
	}
}

// historyOf counts the events and workflow tasks of workflow id's
// history, and returns the ids of the children it started.
func historyOf(t *testing.T, c client.Client, id string) (events, tasks int, children []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		events++
		switch e.GetEventType() {
		case enums.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			tasks++
		case enums.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
			children = append(children, e.GetChildWorkflowExecutionStartedEventAttributes().GetWorkflowExecution().GetWorkflowId())
		}
	}
	return events, tasks, children
}

// A lead's model that sends its job 300 messages in one step costs its
// workflow work linear in them: the sends run on at most 16 coroutines
// (jobWorkers), not one each, which the SDK woke all at each of the
// step's 600 events (its events published, its signals sent); and the
// job takes each once. (300 coroutines ran at once: about 180,000
// wake-ups in the step, minutes on a loaded machine; 1,024 sends ran
// past a workflow task's timeout and did not end.)
func TestJobSendsOfOneStepStayLinear(t *testing.T) {
	hostPort, ns := serverAddr(t)
	c, err := Dial(context.Background(), hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const sent = 300
	co := newCoroutines()
	r := sendManyBy(t, c, policyIDModes[0].id, sent, sent, worker.Options{Interceptors: []interceptor.WorkerInterceptor{co}})
	for i, s := range r.sends {
		if !strings.Contains(s, `"state":"queued"`) {
			t.Fatalf("send %d answered %q, want a receipt, queued", i+1, s)
		}
	}
	if r.took != sent || r.leadCalls != leadStepsOf(sent, sent) || r.jobCalls != 2 {
		t.Errorf("the job took %d messages; the lead's model answered %d times, the job's %d; want %d, %d and 2", r.took, r.leadCalls, r.jobCalls, sent, leadStepsOf(sent, sent))
	}
	events, tasks, _ := historyOf(t, c, r.lead)
	most := co.peakOf(r.lead)
	t.Logf("the lead ran at most %d coroutines at once; its history has %d events, %d workflow tasks", most, events, tasks)
	if limit := 2*jobWorkers + 8; most > limit { // a worker's local activity holds one too
		t.Errorf("the lead ran %d coroutines at once for %d sends in one step, want at most %d", most, sent, limit)
	}
	if limit := 5*sent + 200; events > limit {
		t.Errorf("the lead's history has %d events for %d sends, want at most %d", events, sent, limit)
	}
}
