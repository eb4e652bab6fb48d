package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
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
	"github.com/deputy-go/deputy/tool"
)

// mailRun is what a lead that sends its jobs many messages saw: job_1's
// status while the last batch waited, the results of the sends, job_1's
// status once it had ended, and how many messages the jobs took.
type mailRun struct {
	before, after subagent.JobStatus
	sends         []string
	took          int
	order         map[int][]int // by job: the numbers of the words it took, in the order it took them
	leadCalls     int64
	jobCalls      int64
	lead          string // the lead's workflow id
}

// sendBatch is how many messages the lead of sendMany sends in one step:
// as many as may wait for a job (mailbox.MaxQueued).
const sendBatch = mailbox.MaxQueued

// leadSteps is how many model calls the lead of sendMany makes to send n.
func leadSteps(n int) int64 { return leadStepsOf(n, sendBatch) }

// leadStepsOf is how many model calls the lead of sendMany makes to send
// n, batch a step.
func leadStepsOf(n, batch int) int64 { return int64(1 + (n+batch-1)/batch + 4) }

// jobStepsOf is how many model calls each job of sendMany makes when n
// are sent, batch a step: one before the first batch, and one after each.
func jobStepsOf(n, batch int) int64 { return int64(1 + (n+batch-1)/batch) }

// sendMany runs on the server a lead that starts a job and sends it n
// messages, sendBatch a step, the job taking each batch at a step of its
// own before the next is sent; reads its status while the last batch
// waits, lets the job take it, waits for the job and reads its status
// again.
func sendMany(t *testing.T, c client.Client, id func(n int64, i int) string, n int) mailRun {
	t.Helper()
	return sendManyBy(t, c, id, n, sendBatch, 1, worker.Options{})
}

// sendManyBy is sendMany, sending batch messages a step, spread over
// jobs jobs (message i to job_(i mod jobs)+1), on a worker with opts.
func sendManyBy(t *testing.T, c client.Client, id func(n int64, i int) string, n, batch, jobs int, opts worker.Options) mailRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r := mailRun{order: map[int][]int{}}
	var ids, leadCalls, jobCalls atomic.Int64
	// Each job, at each model call, tells took how many messages it has
	// taken, and waits on more: true, it makes another step (it takes
	// those sent meanwhile before it), false, it answers.
	took := make([]chan int, jobs)
	more := make([]chan bool, jobs)
	for k := range jobs {
		took[k], more[k] = make(chan int), make(chan bool)
	}
	// round lets each job take what was sent to it, and waits until it has.
	round := func(ctx context.Context) error {
		for k := range jobs {
			select {
			case more[k] <- true:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case <-took[k]:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	var mu sync.Mutex
	taskOf := func(k int) string { return fmt.Sprintf("job %d: wait for word", k+1) }
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(i int, name, args string) provider.ToolCall {
			return provider.ToolCall{ID: id(ids.Add(1), i), Name: name, Arguments: json.RawMessage(args)}
		}
		var k int
		if _, err := fmt.Sscanf(firstUserOf(req), "job %d: wait for word", &k); err == nil {
			jobCalls.Add(1)
			n := 0
			var order []int
			for _, msg := range req.Messages {
				if msg.Role == provider.RoleUser {
					n += strings.Count(msg.Content, "from the agent that started you:\nword ")
					for _, w := range inboundWord.FindAllStringSubmatch(msg.Content, -1) {
						i, _ := strconv.Atoi(w[1])
						order = append(order, i)
					}
				}
			}
			mu.Lock()
			r.order[k-1] = order
			mu.Unlock()
			select {
			case took[k-1] <- n:
			case <-ctx.Done():
				return provider.Message{}, ctx.Err()
			}
			select {
			case again := <-more[k-1]:
				if again {
					return provider.AssistantMessage("", call(0, "noop", `{}`)), nil
				}
			case <-ctx.Done():
				return provider.Message{}, ctx.Err()
			}
			return provider.AssistantMessage(fmt.Sprint("took ", n)), nil
		}
		leadCalls.Add(1)
		status := func(into *subagent.JobStatus) error {
			mu.Lock()
			defer mu.Unlock()
			return json.Unmarshal([]byte(rs[len(rs)-1]), into)
		}
		switch done := len(rs) - jobs; {
		case len(rs) == 0:
			calls := make([]provider.ToolCall, jobs)
			for k := range calls {
				calls[k] = call(k, SpawnToolName, `{"task":"`+taskOf(k)+`","background":true}`)
			}
			return provider.AssistantMessage("", calls...), nil
		case done == 0:
			// Each job is at its first model call.
			for k := range jobs {
				select {
				case <-took[k]:
				case <-ctx.Done():
					return provider.Message{}, ctx.Err()
				}
			}
			fallthrough
		case done < n:
			if done > 0 {
				if err := round(ctx); err != nil {
					return provider.Message{}, err
				}
			}
			calls := make([]provider.ToolCall, min(batch, n-done))
			for i := range calls {
				calls[i] = call(i, subagent.JobsToolName, fmt.Sprintf(`{"action":"send","job_id":"job_%d","message":"word %d"}`, (done+i)%jobs+1, done+i+1))
			}
			return provider.AssistantMessage("", calls...), nil
		}
		switch len(rs) - jobs {
		case n:
			mu.Lock()
			r.sends = rs[jobs:]
			mu.Unlock()
			return provider.AssistantMessage("", call(0, subagent.JobsToolName, `{"action":"status","job_id":"job_1"}`)), nil
		case n + 1:
			if err := status(&r.before); err != nil {
				return provider.Message{}, err
			}
			if err := round(ctx); err != nil { // the last batch
				return provider.Message{}, err
			}
			for k := range jobs {
				select {
				case more[k] <- false:
				case <-ctx.Done():
					return provider.Message{}, ctx.Err()
				}
			}
			return provider.AssistantMessage("", call(0, subagent.JobsToolName, `{"action":"wait","timeout_seconds":120}`)), nil
		case n + 2:
			all := 0
			for _, m := range regexp.MustCompile(`took (\d+)`).FindAllStringSubmatch(rs[len(rs)-1], -1) {
				k, _ := strconv.Atoi(m[1])
				all += k
			}
			mu.Lock()
			r.took = all
			mu.Unlock()
			return provider.AssistantMessage("", call(0, subagent.JobsToolName, `{"action":"status","job_id":"job_1"}`)), nil
		case n + 3:
			if err := status(&r.after); err != nil {
				return provider.Message{}, err
			}
		}
		return provider.AssistantMessage("done"), nil
	}}
	queue := fmt.Sprintf("deputy-mail-%d", time.Now().UnixNano())
	w := worker.New(c, queue, opts)
	noop := tool.Must(tool.New("noop", "Does nothing.", func(context.Context, struct{}) (string, error) { return "ok", nil }))
	reg, err := tool.NewRegistry(noop)
	if err != nil {
		t.Fatal(err)
	}
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	r.lead = queue + "-lead"
	spec := Spec{Name: "lead", Provider: "m", Tools: []string{"noop"}, Spawn: true, Background: true, MaxSteps: 30}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: r.lead, TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: spec, Text: "talk to your jobs"})
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

var inboundWord = regexp.MustCompile(`from the agent that started you:\nword (\d+)`)

// A job takes the messages its lead sends it in one step in the order the
// lead sent them, which its receipts number, as in process: a lead that
// sends each of two jobs 20 in one step, interleaved, has each job take
// its 20 at its next step in the order sent. (The server delivered the
// step's signals in any order, and a job took them shuffled.)
func TestJobMessagesOfOneStepArriveInOrder(t *testing.T) {
	hostPort, ns := serverAddr(t)
	c, err := Dial(context.Background(), hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const sent, jobs = 40, 2
	r := sendManyBy(t, c, policyIDModes[0].id, sent, sent, jobs, worker.Options{})
	for k := range jobs {
		var want []int
		for i := k + 1; i <= sent; i += jobs {
			want = append(want, i)
		}
		if got := r.order[k]; !slices.Equal(got, want) {
			t.Errorf("job_%d took words %v, want %v: in the order sent", k+1, got, want)
		}
	}
	if r.took != sent {
		t.Errorf("the jobs took %d messages, want %d", r.took, sent)
	}
}

// A job's status lists the receipts of its newest 64 messages, as in
// process (mailbox.MaxReceipts, TestJobListsTheLastReceipts), and counts
// the older in its messages_dropped: a lead that sends its job 120 in
// batches of 40, each taken at a step of the job's before the next is
// sent, reads the newest 64, numbered 57 to 120, the last 40 queued, and
// 56 dropped; after the job took them, each once, the same 64 delivered,
// each at the step after its batch was sent. (The run kept 256, and its
// status counted none dropped.)
func TestJobReceiptsBoundAsInProcess(t *testing.T) {
	inEachIDMode(t, func(t *testing.T, c client.Client, id func(n int64, i int) string) {
		const sent, batch = 120, 40
		r := sendManyBy(t, c, id, sent, batch, 1, worker.Options{})
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
		for _, m := range r.before.Messages {
			if want := m.Seq > sent-batch; (m.State == subagent.MessageQueued) != want {
				t.Errorf("while the last batch waited, receipt %+v; want it queued: %v", m, want)
				break
			}
		}
		for _, m := range r.after.Messages {
			if step := (m.Seq-1)/batch + 2; m.State != subagent.MessageDelivered || m.Step != step {
				t.Errorf("after the job ended, receipt %+v, want delivered before step %d", m, step)
				break
			}
		}
		if r.took != sent || r.leadCalls != leadStepsOf(sent, batch) || r.jobCalls != jobStepsOf(sent, batch) {
			t.Errorf("the job took %d messages; the lead's model answered %d times, the job's %d; want %d, %d and %d",
				r.took, r.leadCalls, r.jobCalls, sent, leadStepsOf(sent, batch), jobStepsOf(sent, batch))
		}
	})
}

// A job has at most 64 messages waiting, as in process
// (mailbox.MaxQueued): a lead that sends its job 70 in one step has the
// last 6 refused with the error in process says so, and once the job has
// taken the 64 at its next step, the next 70 the same; the job takes the
// 128 let in, each once. (Every send was let in, and the job took 140 at
// once.)
func TestJobQueueBoundAsInProcess(t *testing.T) {
	inEachIDMode(t, func(t *testing.T, c client.Client, id func(n int64, i int) string) {
		const sent, batch = 140, 70
		r := sendManyBy(t, c, id, sent, batch, 1, worker.Options{})
		full := fmt.Sprintf("job job_1: %v", mailbox.ErrFull)
		for i, s := range r.sends {
			if i%batch < mailbox.MaxQueued {
				if !strings.Contains(s, `"state":"queued"`) {
					t.Fatalf("send %d answered %q, want a receipt, queued", i+1, s)
				}
			} else if s != full {
				t.Fatalf("send %d answered %q, want %q", i+1, s, full)
			}
		}
		const let = 2 * mailbox.MaxQueued
		if ms := r.before.Messages; len(ms) != mailbox.MaxReceipts || ms[0].Seq != let-mailbox.MaxReceipts+1 || ms[0].State != subagent.MessageQueued {
			t.Errorf("while the second batch waited, the status listed %d receipts (%+v …); want %d, from %d, queued", len(ms), first(ms), mailbox.MaxReceipts, let-mailbox.MaxReceipts+1)
		}
		if r.took != let || r.after.Dropped != let-mailbox.MaxReceipts {
			t.Errorf("the job took %d messages, and its status counts %d dropped; want %d and %d", r.took, r.after.Dropped, let, let-mailbox.MaxReceipts)
		}
		if r.leadCalls != leadStepsOf(sent, batch) || r.jobCalls != jobStepsOf(sent, batch) {
			t.Errorf("the lead's model answered %d times, the job's %d; want %d and %d", r.leadCalls, r.jobCalls, leadStepsOf(sent, batch), jobStepsOf(sent, batch))
		}
	})
}

// A job takes at most 1,024 messages in its life, as in process
// (mailbox.MaxMessages, TestJobTakesAtMostMaxMessages): sent them 64 a
// step, each batch taken before the next, the 1,025th send is refused
// with the error in process says so, and none of the 1,024 is lost: the
// job takes each once. (Every send was let in.)
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
	if r.leadCalls != leadSteps(sent) || r.jobCalls != jobStepsOf(sent, sendBatch) {
		t.Errorf("the lead's model answered %d times, the job's %d; want %d and %d", r.leadCalls, r.jobCalls, leadSteps(sent), jobStepsOf(sent, sendBatch))
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

// A lead's model that sends its five jobs 300 messages in one step (60
// each: fewer than may wait for a job) costs its workflow work linear in
// them: the sends run on at most 16 coroutines (jobWorkers), not one
// each, which the SDK woke all at each of the step's 600 events (its
// events published, its signals sent); and the jobs take each once. (300 coroutines ran at once: about 180,000
// wake-ups in the step, minutes on a loaded machine; 1,024 sends ran
// past a workflow task's timeout and did not end.)
func TestJobSendsOfOneStepStayLinear(t *testing.T) {
	hostPort, ns := serverAddr(t)
	c, err := Dial(context.Background(), hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const sent, jobs = 300, 5 // 60 to each, fewer than may wait for one (mailbox.MaxQueued)
	co := newCoroutines()
	r := sendManyBy(t, c, policyIDModes[0].id, sent, sent, jobs, worker.Options{Interceptors: []interceptor.WorkerInterceptor{co}})
	for i, s := range r.sends {
		if !strings.Contains(s, `"state":"queued"`) {
			t.Fatalf("send %d answered %q, want a receipt, queued", i+1, s)
		}
	}
	if r.took != sent || r.leadCalls != leadStepsOf(sent, sent) || r.jobCalls != jobs*2 {
		t.Errorf("the jobs took %d messages; the lead's model answered %d times, the jobs' %d; want %d, %d and %d", r.took, r.leadCalls, r.jobCalls, sent, leadStepsOf(sent, sent), jobs*2)
	}
	events, tasks, _ := historyOf(t, c, r.lead)
	most := co.peakOf(r.lead)
	t.Logf("the lead ran at most %d coroutines at once; its history has %d events, %d workflow tasks", most, events, tasks)
	if limit := 2*jobWorkers + 8 + jobs; most > limit { // a worker's local activity holds one too, and each job one
		t.Errorf("the lead ran %d coroutines at once for %d sends in one step, want at most %d", most, sent, limit)
	}
	if limit := 5*sent + 200; events > limit {
		t.Errorf("the lead's history has %d events for %d sends, want at most %d", events, sent, limit)
	}
}
