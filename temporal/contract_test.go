package temporal

import (
	"context"
	"encoding/json"
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
	"github.com/deputy-go/deputy/subagent"
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
	// A member a factory builds is a child workflow here: its job's
	// activity could not read its messages from a server that is not.
	parts := treeParts{noFactories: true}
	spec := parts.specOf(tree)
	env := newEnv(t, parts.runtime(t, tree.Provider))
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
	err := env.GetWorkflowError()
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

// treeParts are what the workers of a contracttest.Tree need beside its
// Spec: its plain tools and its children's, for their registry, and the
// factories of the members built in Go (SubAgent.Factory).
type treeParts struct {
	tools     []tool.Tool
	factories map[string]subagent.Factory
	// noFactories: every member is built as an Agent member.
	noFactories bool
}

// specOf is the Spec of tree, its parts gathered in p.
func (p *treeParts) specOf(tree contracttest.Tree) Spec {
	s := Spec{Name: tree.System, Provider: "m", System: tree.System, Spawn: tree.Spawn, MaxSpawns: tree.MaxSpawns, Background: tree.Background,
		TokenLimit: tree.TokenLimit, ToolRetries: tree.ToolRetries}
	for _, tl := range tree.Tools {
		s.Tools = append(s.Tools, tl.Definition().Name)
		p.tools = append(p.tools, tl)
	}
	for _, sa := range tree.SubAgents {
		if sa.React {
			s.SubAgents = append(s.SubAgents, SubAgent{Name: sa.Name, Description: sa.Description, React: true})
			continue
		}
		child := p.specOf(sa.Tree)
		child.OutputSchema, child.MaxOutputBytes = sa.OutputSchema, sa.MaxOutputBytes
		s.SubAgents = append(s.SubAgents, SubAgent{Name: sa.Name, Description: sa.Description, Agent: &child})
	}
	for _, sa := range tree.Roster {
		if sa.Factory && !p.noFactories {
			// Its agent, with its own tools, built in process where the
			// worker runs it.
			m := sa.Tree
			if p.factories == nil {
				p.factories = map[string]subagent.Factory{}
			}
			p.factories[sa.Name] = func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(m.Provider, agent.WithName(sa.Name), agent.WithSystemPrompt(m.System), agent.WithTools(m.Tools...))
			}
			s.Roster = append(s.Roster, SubAgent{Name: sa.Name, Description: sa.Description, Factory: sa.Name})
			continue
		}
		child := p.specOf(sa.Tree)
		s.Roster = append(s.Roster, SubAgent{Name: sa.Name, Description: sa.Description, Agent: &child})
	}
	return s
}

// runtime is the Runtime of the tree's workers, m its one provider.
func (p *treeParts) runtime(t *testing.T, m provider.Provider) *Runtime {
	reg, err := tool.NewRegistry(p.tools...)
	if err != nil {
		t.Fatal(err)
	}
	return &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Factories: p.factories}
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
	var parts treeParts
	spec := parts.specOf(tree)
	queue := fmt.Sprintf("deputy-contract-%d", time.Now().UnixNano())
	w := worker.New(r.c, queue, worker.Options{})
	Register(w, parts.runtime(t, tree.Provider))
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
	var parts treeParts
	spec := parts.specOf(tree)
	spec.JobsAcrossTurns = true
	queue := fmt.Sprintf("deputy-contract-thread-%d", time.Now().UnixNano())
	w := worker.New(r.c, queue, worker.Options{})
	Register(w, parts.runtime(t, tree.Provider))
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
