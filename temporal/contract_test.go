package temporal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/contracttest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// The contract suite the in-process agents run, run on workflows, on the
// SDK's test environment: the same trees, the same models, the same
// outcomes.
func TestContracts(t *testing.T) { contracttest.Run(t, testEnvRuntime{}) }

// testEnvRuntime runs a contracttest.Tree as AgentWorkflow on the SDK's
// test environment.
type testEnvRuntime struct{}

func (testEnvRuntime) Run(t *testing.T, tree contracttest.Tree, answer func([]tool.Interrupt) []tool.Answer) contracttest.Outcome {
	t.Helper()
	var tools []tool.Tool
	spec := specOf(tree, &tools)
	reg, err := tool.NewRegistry(tools...)
	if err != nil {
		t.Fatal(err)
	}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": tree.Provider}, Tools: reg})
	if answer != nil {
		env.RegisterDelayedCallback(func() {
			v, err := env.QueryWorkflow(InterruptsQuery)
			if err != nil {
				t.Errorf("query: %v", err)
				return
			}
			var pending []tool.Interrupt
			if err := v.Get(&pending); err != nil || len(pending) == 0 {
				return
			}
			env.UpdateWorkflow(AnswerUpdate, "answer", noCallbacks{t}, answer(pending))
		}, time.Hour)
	}
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: tree.Task})
	var out RunOutput
	err = env.GetWorkflowError()
	if err == nil {
		err = env.GetWorkflowResult(&out)
	}
	o := contracttest.Outcome{Answer: out.Answer, Usage: out.Usage, ChildUsage: out.ChildUsage, Err: err}
	if err != nil {
		o.Usage = UsageOf(err)
		o.Failure = failureOf(err)
	}
	return o
}

// failureOf names the limit a failed run ended at, as contracttest does.
func failureOf(err error) string {
	var app *sdktemporal.ApplicationError
	if errors.As(err, &app) {
		switch app.Type() {
		case ErrTypeUsageLimit:
			return "usage_limit"
		case ErrTypeToolRetries:
			return "tool_retries"
		case ErrTypeMaxSteps:
			return "max_steps"
		}
	}
	return ""
}

// specOf is the Spec of tree; its plain tools, and its children's, are
// gathered in tools for the worker's registry.
func specOf(tree contracttest.Tree, tools *[]tool.Tool) Spec {
	s := Spec{Name: tree.System, Provider: "m", System: tree.System, Spawn: tree.Spawn, MaxSpawns: tree.MaxSpawns, Background: tree.Background,
		TokenLimit: tree.TokenLimit, ToolRetries: tree.ToolRetries}
	for _, tl := range tree.Tools {
		s.Tools = append(s.Tools, tl.Definition().Name)
		*tools = append(*tools, tl)
	}
	for _, sa := range tree.SubAgents {
		if sa.React {
			s.SubAgents = append(s.SubAgents, SubAgent{Name: sa.Name, Description: sa.Description, React: true})
			continue
		}
		child := specOf(sa.Tree, tools)
		child.OutputSchema, child.MaxOutputBytes = sa.OutputSchema, sa.MaxOutputBytes
		s.SubAgents = append(s.SubAgents, SubAgent{Name: sa.Name, Description: sa.Description, Agent: &child})
	}
	for _, sa := range tree.Roster {
		child := specOf(sa.Tree, tools)
		s.Roster = append(s.Roster, SubAgent{Name: sa.Name, Description: sa.Description, Agent: &child})
	}
	return s
}

type noCallbacks struct{ t *testing.T }

func (noCallbacks) Accept()            {}
func (c noCallbacks) Reject(err error) { c.t.Errorf("the answers were refused: %v", err) }
func (c noCallbacks) Complete(_ any, err error) {
	if err != nil {
		c.t.Errorf("the answers failed: %v", err)
	}
}

// The same suite on a real server: each tree on a worker of its own, the
// questions answered through Pending and Answer.
func TestContractsOnServer(t *testing.T) {
	hostPort, ns := serverAddr(t)
	c, err := Dial(context.Background(), hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	contracttest.Run(t, serverRuntime{c})
}

type serverRuntime struct{ c client.Client }

func (r serverRuntime) Run(t *testing.T, tree contracttest.Tree, answer func([]tool.Interrupt) []tool.Answer) contracttest.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var tools []tool.Tool
	spec := specOf(tree, &tools)
	reg, err := tool.NewRegistry(tools...)
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-contract-%d", time.Now().UnixNano())
	w := worker.New(r.c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": tree.Provider}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	run, err := r.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue, TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: spec, Text: tree.Task})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	if answer != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if pending, err := Pending(ctx, r.c, queue); err == nil && len(pending) > 0 {
					if err := Answer(ctx, r.c, queue, answer(pending)...); err != nil {
						t.Errorf("answering: %v", err)
					}
					return
				}
			}
		}()
	}
	var out RunOutput
	err = run.Get(ctx, &out)
	close(done)
	wg.Wait()
	o := contracttest.Outcome{Answer: out.Answer, Usage: out.Usage, ChildUsage: out.ChildUsage, Err: err}
	if err != nil {
		o.Usage = UsageOf(err)
		o.Failure = failureOf(err)
	}
	return o
}

// RunThread runs the turns as turns of one thread through Agent, each
// started once the last has ended, on a worker of the thread's own.
func (r serverRuntime) RunThread(t *testing.T, tree contracttest.Tree, turns []string, between func(int)) []contracttest.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var tools []tool.Tool
	spec := specOf(tree, &tools)
	spec.JobsAcrossTurns = true
	reg, err := tool.NewRegistry(tools...)
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-contract-thread-%d", time.Now().UnixNano())
	w := worker.New(r.c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": tree.Provider}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	lead := &Agent{Client: r.c, TaskQueue: queue, Spec: spec}
	tctx := agent.WithThread(ctx, queue)
	var outs []contracttest.Outcome
	for i, text := range turns {
		out, err := lead.Run(tctx, agent.Input{Text: text})
		outs = append(outs, contracttest.Outcome{Answer: out.Answer, Usage: out.Usage, ChildUsage: out.ChildUsage, Err: err, Failure: failureOf(err)})
		if between != nil && i < len(turns)-1 {
			between(i)
		}
	}
	return outs
}
