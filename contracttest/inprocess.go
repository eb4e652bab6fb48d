package contracttest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// InProcess is the core's runtime: a tree of agent.React agents, its
// children sub-agent tools (subagent.FromFactory) and the spawn tool, run
// in this process under a journal, so that a run a question paused
// resumes as the AG-UI handler resumes it.
type InProcess struct{}

// Run implements Runtime.
func (InProcess) Run(t *testing.T, tree Tree, answer func([]tool.Interrupt) []tool.Answer) Outcome {
	t.Helper()
	lead, err := build(tree, nil)
	if err != nil {
		t.Fatalf("building the tree: %v", err)
	}
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	var spent Outcome
	for range 8 {
		j, err := st.Journal(ctx, "turn")
		if err != nil {
			t.Fatal(err)
		}
		out, err := lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: tree.Task})
		// A resumed journaled turn reports the whole turn's usage, the
		// answers it replays included: the last run's is the turn's.
		spent.Usage, spent.ChildUsage = out.Usage, out.ChildUsage
		var asked *tool.Interrupted
		if errors.As(err, &asked) && answer != nil {
			if ctx, err = tool.Resume(context.Background(), asked, answer(asked.Interrupts)...); err != nil {
				t.Fatalf("the answers: %v", err)
			}
			continue
		}
		spent.Answer, spent.Err, spent.Failure = out.Answer, err, failure(err)
		return spent
	}
	t.Fatal("the tree asked eight rounds of questions")
	return spent
}

func failure(err error) string {
	switch {
	case errors.Is(err, agent.ErrUsageLimit):
		return "usage_limit"
	case errors.Is(err, agent.ErrToolRetries):
		return "tool_retries"
	case errors.Is(err, agent.ErrMaxSteps):
		return "max_steps"
	}
	return ""
}

// RunThread implements ThreadRuntime: the turns run one after another
// under one thread (agent.WithThread), their jobs the thread's
// (subagent.WithJobsAcrossTurns), ended with the test.
func (InProcess) RunThread(t *testing.T, tree Tree, turns []string, between func(int)) []Outcome {
	t.Helper()
	var spawners []*subagent.Spawner
	defer func() {
		for _, s := range spawners {
			s.Close()
		}
	}()
	lead, err := build(tree, &spawners)
	if err != nil {
		t.Fatalf("building the tree: %v", err)
	}
	ctx := agent.WithThread(context.Background(), "thread")
	var outs []Outcome
	for i, text := range turns {
		out, err := lead.Run(ctx, agent.Input{Text: text})
		outs = append(outs, Outcome{Answer: out.Answer, Usage: out.Usage, ChildUsage: out.ChildUsage, Err: err, Failure: failure(err)})
		if between != nil && i < len(turns)-1 {
			between(i)
		}
	}
	return outs
}

// build makes the agent of tree, its children built per call. With
// thread, its spawner gives the jobs of a top-level run to its thread
// and is added there, to be closed.
func build(tree Tree, thread *[]*subagent.Spawner) (*agent.React, error) {
	tools := append([]tool.Tool(nil), tree.Tools...)
	for _, sa := range tree.SubAgents {
		child := sa.Tree
		var opts []subagent.Option
		if sa.React {
			st, err := subagent.FromReact(sa.Name, sa.Description, tree.Provider, nil, opts...)
			if err != nil {
				return nil, err
			}
			tools = append(tools, st)
			continue
		}
		if sa.OutputSchema != nil {
			opts = append(opts, subagent.WithOutputSchema(sa.OutputSchema))
		}
		if sa.MaxOutputBytes > 0 {
			opts = append(opts, subagent.WithMaxOutputBytes(sa.MaxOutputBytes))
		}
		st, err := subagent.FromFactory(sa.Name, sa.Description, func(context.Context, json.RawMessage) (agent.Agent, error) {
			return build(child, nil)
		}, opts...)
		if err != nil {
			return nil, err
		}
		tools = append(tools, st)
	}
	reg, err := tool.NewRegistry(tools...)
	if err != nil {
		return nil, err
	}
	if tree.Spawn {
		var opts []subagent.SpawnOption
		if tree.MaxSpawns > 0 {
			opts = append(opts, subagent.WithMaxSpawns(tree.MaxSpawns))
		}
		if tree.Background {
			opts = append(opts, subagent.WithBackground())
		}
		var members []*subagent.SubAgentTool
		for _, sa := range tree.Roster {
			child := sa.Tree
			st, err := subagent.FromFactory(sa.Name, sa.Description, func(context.Context, json.RawMessage) (agent.Agent, error) {
				return build(child, nil)
			})
			if err != nil {
				return nil, err
			}
			members = append(members, st)
		}
		if len(members) > 0 {
			opts = append(opts, subagent.WithRoster(members...))
		}
		if thread != nil {
			opts = append(opts, subagent.WithJobsAcrossTurns(nil))
		}
		sp, err := subagent.NewSpawner(tree.Provider, reg, opts...)
		if err != nil {
			return nil, err
		}
		if thread != nil {
			*thread = append(*thread, sp)
		}
		if err := reg.Register(sp); err != nil {
			return nil, err
		}
		if tree.Background {
			if err := reg.Register(sp.JobsTool()); err != nil {
				return nil, err
			}
		}
	}
	opts := []agent.Option{agent.WithSystemPrompt(tree.System), agent.WithTools(reg.Tools()...)}
	if tree.TokenLimit > 0 {
		opts = append(opts, agent.WithTokenLimit(tree.TokenLimit))
	}
	if tree.ToolRetries != 0 {
		opts = append(opts, agent.WithToolRetries(tree.ToolRetries))
	}
	return agent.NewReact(tree.Provider, opts...)
}
