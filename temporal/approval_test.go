package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// payScript is a lead that pays 1 and, in the same step, spawns a fork
// that pays 2; each answers with what the payment said.
func payScript() *script {
	return &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		last := req.Messages[len(req.Messages)-1]
		fork := strings.HasPrefix(lastUser(req), "part ")
		switch {
		case last.Role == provider.RoleTool && fork:
			return provider.AssistantMessage("fork: " + last.Content), nil
		case last.Role == provider.RoleTool:
			var said []string
			for _, m := range req.Messages {
				if m.Role == provider.RoleTool {
					said = append(said, m.Content)
				}
			}
			return provider.AssistantMessage("lead: " + strings.Join(said, "; ")), nil
		case fork:
			return provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"amount":2}`)}), nil
		}
		return provider.AssistantMessage("",
			provider.ToolCall{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"amount":1}`)},
			provider.ToolCall{ID: "c2", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"part pay"}`)}), nil
	}}
}

// payTools is a registry with one tool, pay, that asks a person first; it
// counts the payments made.
func payTools(t *testing.T, paid *atomic.Int64) *tool.Registry {
	t.Helper()
	pay, err := tool.New("pay", "Pays.", func(ctx context.Context, in struct {
		Amount int `json:"amount"`
	}) (string, error) {
		paid.Add(1)
		return fmt.Sprintf("paid %d", in.Amount), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry(tool.RequireApproval(pay, "moves money", 0))
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// A question asked anywhere in a tree on Temporal waits, durably, for its
// answer: the lead's and its fork's are both listed at the top-level
// workflow, a day goes by, both are answered in one update, each payment
// is made once, and a second answer to either is refused.
func TestApprovalsAnywhereInTheTree(t *testing.T) {
	for _, approve := range []bool{true, false} {
		t.Run(fmt.Sprintf("approved=%v", approve), func(t *testing.T) {
			var paid atomic.Int64
			scr := payScript()
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": scr}, Tools: payTools(t, &paid)})
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "payer"})
			var pending []tool.Interrupt
			var answerErr, againErr error
			env.RegisterDelayedCallback(func() {
				v, err := env.QueryWorkflow(InterruptsQuery)
				if err != nil {
					t.Errorf("query: %v", err)
					return
				}
				if err := v.Get(&pending); err != nil {
					t.Error(err)
				}
				if paid.Load() != 0 {
					t.Errorf("%d payments before any answer", paid.Load())
				}
				var answers []tool.Answer
				for _, it := range pending {
					answers = append(answers, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(fmt.Sprintf(`{"approved":%v}`, approve))})
				}
				env.UpdateWorkflow(AnswerUpdate, "a1", &testsuite.TestUpdateCallback{
					OnAccept: func() {}, OnReject: func(err error) { answerErr = err }, OnComplete: func(_ any, err error) {
						if err != nil {
							answerErr = err
						}
					},
				}, answers)
				env.UpdateWorkflow(AnswerUpdate, "a2", &testsuite.TestUpdateCallback{
					OnAccept: func() {}, OnReject: func(err error) { againErr = err }, OnComplete: func(any, error) {},
				}, answers[:1])
			}, 24*time.Hour)
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay"}, Spawn: true}, Text: "pay"})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			if len(pending) != 2 {
				t.Fatalf("the tree waited on %+v, want the lead's question and its fork's", pending)
			}
			var fromFork int
			for _, it := range pending {
				if it.SubagentRunID != "" {
					fromFork++
				}
				if it.Reason != tool.ApprovalReason || len(it.ResponseSchema) == 0 {
					t.Errorf("question %+v: want an approval with its schema", it)
				}
			}
			if fromFork != 1 {
				t.Errorf("%d questions attributed to the fork, want 1", fromFork)
			}
			if answerErr != nil {
				t.Fatalf("the answers were refused: %v", answerErr)
			}
			if againErr == nil || !(strings.Contains(againErr.Error(), "no such pending interrupt") || strings.Contains(againErr.Error(), "nothing is waiting")) {
				t.Errorf("a second answer to an answered question: %v, want it refused", againErr)
			}
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			want := int64(0)
			if approve {
				want = 2
			}
			if paid.Load() != want {
				t.Errorf("%d payments, want %d", paid.Load(), want)
			}
			if approve && (!strings.Contains(out.Answer, "paid 1") || !strings.Contains(out.Answer, "fork: paid 2")) {
				t.Errorf("answer %q, want both payments in it", out.Answer)
			}
			if !approve && !strings.Contains(out.Answer, "did not approve") {
				t.Errorf("answer %q, want the refusals in it", out.Answer)
			}
			// One ledger: the workflow's output, across the wait for the
			// answers, is what the model billed, each call once.
			if calls, billed := scr.total(); out.TotalUsage() != billed || billed.Requests != int64(calls) {
				t.Errorf("the workflow reports %+v, the model billed %+v over %d calls", out.TotalUsage(), billed, calls)
			}
		})
	}
}

// On a real server, with the Go calls a program answers through: the tree
// waits on its two questions, its worker stops and another starts in its
// place, the answers go in, and each payment is made once — by the new
// worker.
func TestApprovalSurvivesAWorkerRestart(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	queue := fmt.Sprintf("deputy-approval-%d", time.Now().UnixNano())
	var paidBefore, paidAfter atomic.Int64
	w1 := worker.New(c, queue, worker.Options{})
	Register(w1, &Runtime{Providers: map[string]provider.Provider{"m": payScript()}, Tools: payTools(t, &paidBefore)})
	if err := w1.Start(); err != nil {
		t.Fatal(err)
	}
	tree := "approval-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName,
		RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay"}, Spawn: true}, Text: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	var pending []tool.Interrupt
	for len(pending) < 2 {
		if ctx.Err() != nil {
			t.Fatalf("the tree waits on %+v, want two questions", pending)
		}
		time.Sleep(50 * time.Millisecond)
		if pending, err = Pending(ctx, c, tree); err != nil {
			t.Fatal(err)
		}
	}
	w1.Stop()
	w2 := worker.New(c, queue, worker.Options{})
	Register(w2, &Runtime{Providers: map[string]provider.Provider{"m": payScript()}, Tools: payTools(t, &paidAfter)})
	if err := w2.Start(); err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	bad := tool.Answer{InterruptID: pending[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":"yes"}`)}
	if err := Answer(ctx, c, tree, bad); err == nil || !strings.Contains(err.Error(), "invalid answer") {
		t.Errorf("an answer that fails the schema: %v, want it refused", err)
	}
	var answers []tool.Answer
	for _, it := range pending {
		answers = append(answers, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
	}
	if err := Answer(ctx, c, tree, answers...); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if paidBefore.Load() != 0 || paidAfter.Load() != 2 {
		t.Errorf("payments: %d by the first worker, %d by the second; want 0 and 2", paidBefore.Load(), paidAfter.Load())
	}
	if err := Answer(ctx, c, tree, answers[0]); err == nil {
		t.Error("an answer to a finished tree was taken")
	}
}

// breaker fails every workflow task of the workflows it intercepts that
// applies the signal breakSignal, for as long as it is broken: their
// tasks fail, then time out, and the server refuses queries and updates
// to them until a task succeeds again.
type breaker struct {
	interceptor.WorkerInterceptorBase
	broken atomic.Bool
}

const breakSignal = "test.break"

func (b *breaker) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &breakerIn{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, b: b}
}

type breakerIn struct {
	interceptor.WorkflowInboundInterceptorBase
	b *breaker
}

func (in *breakerIn) HandleSignal(ctx workflow.Context, s *interceptor.HandleSignalInput) error {
	if s.SignalName == breakSignal && in.b.broken.Load() {
		panic("broken on purpose")
	}
	return in.Next.HandleSignal(ctx, s)
}

// notReadySeen tells, by closing seen, that the server refused a query or
// an update because the workflow's task was failing.
type notReadySeen struct {
	interceptor.ClientInterceptorBase
	query, update chan struct{}
}

func (n *notReadySeen) InterceptClient(next interceptor.ClientOutboundInterceptor) interceptor.ClientOutboundInterceptor {
	return &notReadyOut{ClientOutboundInterceptorBase: interceptor.ClientOutboundInterceptorBase{Next: next}, n: n}
}

type notReadyOut struct {
	interceptor.ClientOutboundInterceptorBase
	n *notReadySeen
}

func seen(err error, ch chan struct{}) {
	var nr *serviceerror.WorkflowNotReady
	if errors.As(err, &nr) {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
}

func (o *notReadyOut) QueryWorkflow(ctx context.Context, in *interceptor.ClientQueryWorkflowInput) (converter.EncodedValue, error) {
	v, err := o.Next.QueryWorkflow(ctx, in)
	seen(err, o.n.query)
	return v, err
}

func (o *notReadyOut) UpdateWorkflow(ctx context.Context, in *interceptor.ClientUpdateWorkflowInput) (client.WorkflowUpdateHandle, error) {
	h, err := o.Next.UpdateWorkflow(ctx, in)
	seen(err, o.n.update)
	return h, err
}

// While the tree's workflow task keeps failing, the server refuses to be
// asked what it waits on and to take answers; Pending and Answer wait it
// out, and the answer is taken once, when a task succeeds again.
func TestPendingAndAnswerWaitOutAFailingWorkflowTask(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	watch := &notReadySeen{query: make(chan struct{}), update: make(chan struct{})}
	c, err := client.DialContext(ctx, client.Options{HostPort: hostPort, Namespace: ns, Interceptors: []interceptor.ClientInterceptor{watch},
		Logger: log.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	queue := fmt.Sprintf("deputy-not-ready-%d", time.Now().UnixNano())
	var paid atomic.Int64
	brk := &breaker{}
	w := worker.New(c, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{brk}})
	lead := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
			return provider.AssistantMessage("lead: " + last.Content), nil
		}
		return provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"amount":1}`)}), nil
	}}
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": lead}, Tools: payTools(t, &paid)})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	tree := "not-ready-" + queue
	// Each failed task after the first times out, in a second.
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue, WorkflowTaskTimeout: time.Second}, AgentWorkflowName,
		RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay"}}, Text: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	var pending []tool.Interrupt
	for len(pending) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the tree never asked")
		}
		time.Sleep(50 * time.Millisecond)
		if pending, err = Pending(ctx, c, tree); err != nil {
			t.Fatal(err)
		}
	}
	brk.broken.Store(true)
	if err := c.SignalWorkflow(ctx, tree, "", breakSignal, nil); err != nil {
		t.Fatal(err)
	}
	// The server refuses them from the third attempt of a task on.
	for {
		d, err := describe(ctx, c, tree)
		if err != nil {
			t.Fatal(err)
		}
		if d.GetPendingWorkflowTask().GetAttempt() >= 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the workflow task never failed three times")
		}
		time.Sleep(100 * time.Millisecond)
	}
	type result struct {
		pending []tool.Interrupt
		err     error
	}
	asked, answered := make(chan result, 1), make(chan error, 1)
	go func() {
		p, err := Pending(ctx, c, tree)
		asked <- result{p, err}
	}()
	go func() {
		answered <- Answer(ctx, c, tree, tool.Answer{InterruptID: pending[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
	}()
	// Once the server has refused both, the tasks succeed again.
	for _, ch := range []chan struct{}{watch.query, watch.update} {
		select {
		case <-ch:
		case r := <-asked:
			t.Fatalf("Pending returned %v, %v while the workflow task was failing", r.pending, r.err)
		case err := <-answered:
			t.Fatalf("Answer returned %v while the workflow task was failing", err)
		case <-ctx.Done():
			t.Fatal("the server never refused a query and an update while the workflow task was failing")
		}
	}
	brk.broken.Store(false)
	if r := <-asked; r.err != nil {
		t.Fatalf("Pending, once the workflow task succeeds again: %v", r.err)
	}
	if err := <-answered; err != nil {
		t.Fatalf("Answer, once the workflow task succeeds again: %v", err)
	}
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if out.Answer != "lead: paid 1" || paid.Load() != 1 {
		t.Fatalf("answer %q after %d payments, want one", out.Answer, paid.Load())
	}
}
