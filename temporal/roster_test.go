package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

const surveyorSystem = "You survey land."

// rosterSpec is a lead whose spawn_subagent starts, by name, a surveyor
// (an Agent with a tool the lead lacks and a system prompt of its own),
// a writer (a Factory) and a dreamer (a React sub-agent, which cannot be
// a member).
func rosterSpec(background bool) Spec {
	return Spec{Name: "lead", Provider: "m", Spawn: true, Background: background, Roster: []SubAgent{
		{Name: "surveyor", Description: "Surveys land.", Agent: &Spec{Name: "surveyor", Provider: "m", System: surveyorSystem, Tools: []string{"record"}}},
		{Name: "writer", Description: "Writes.", Factory: "writer"},
		{Name: "dreamer", Description: "Dreams.", React: true},
	}}
}

// A spawn names a member of the lead's roster with "agent": the member
// runs as itself — its own system prompt and tools, its own name — where
// a spawn without it forks the lead; a name not on the roster, and a
// React sub-agent on it, are refused, saying what to do; the policy is
// asked about the hand-off under the member's name.
func TestRosterMembersStartByName(t *testing.T) {
	for _, deny := range []bool{false, true} {
		t.Run(fmt.Sprintf("deny=%v", deny), func(t *testing.T) {
			var records, writes atomic.Int64
			var mu sync.Mutex
			var offered []provider.ToolDef
			systems := map[string]string{} // task → the system prompt it ran under
			m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
				rs := resultsOf(req)
				task := firstUserOf(req)
				mu.Lock()
				systems[task] = req.System
				mu.Unlock()
				switch {
				case strings.HasSuffix(task, "survey the hills"):
					if len(rs) == 0 {
						return provider.AssistantMessage("", provider.ToolCall{ID: "r", Name: "record", Arguments: json.RawMessage(`{}`)}), nil
					}
					return provider.AssistantMessage("hills: 3"), nil
				case task == "fork the plan":
					return provider.AssistantMessage("plan forked"), nil
				case len(rs) == 0:
					mu.Lock()
					offered = req.Tools
					mu.Unlock()
					return provider.AssistantMessage("",
						provider.ToolCall{ID: "a", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"survey the hills","context":"the north","agent":"surveyor"}`)},
						provider.ToolCall{ID: "b", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"write it up","agent":"writer"}`)},
						provider.ToolCall{ID: "c", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"x","agent":"nobody"}`)},
						provider.ToolCall{ID: "d", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"x","agent":"dreamer"}`)},
						provider.ToolCall{ID: "e", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"fork the plan"}`)}), nil
				}
				return provider.AssistantMessage(strings.Join(rs, " | ")), nil
			}}
			writer := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
				writes.Add(1)
				return provider.AssistantMessage("wrote: " + firstUserOf(req)), nil
			}}
			record := tool.Must(tool.New("record", "Records.", func(context.Context, struct{}) (string, error) {
				records.Add(1)
				return "recorded", nil
			}))
			reg, err := tool.NewRegistry(record)
			if err != nil {
				t.Fatal(err)
			}
			rt := &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Factories: map[string]subagent.Factory{
				"writer": func(context.Context, json.RawMessage) (agent.Agent, error) {
					return agent.NewReact(writer, agent.WithName("writer"))
				},
			}}
			if deny {
				pol, err := policy.New(policy.DenyTools("no-surveys", policy.AnyDepth, "surveyor"))
				if err != nil {
					t.Fatal(err)
				}
				rt.Policy = pol
			}
			hub := NewHub()
			rt.Events = hub
			env := newEnv(t, rt)
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "tree-roster"})
			var rec recorder
			defer hub.Subscribe(event.WithSink(context.Background(), &rec), "tree-roster")()
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: rosterSpec(false), Text: "plan the survey"})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			parts := strings.Split(out.Answer, " | ")
			if len(parts) != 5 {
				t.Fatalf("the lead read %q, want five results", out.Answer)
			}
			if deny {
				if !strings.Contains(parts[0], "surveyor is not allowed here") || records.Load() != 0 {
					t.Errorf("the surveyor's hand-off under a deny list naming it: %q, its tool ran %d times; want it denied, the tool never run", parts[0], records.Load())
				}
			} else if parts[0] != "hills: 3" || records.Load() != 1 || systems["Context:\nthe north\n\nTask:\nsurvey the hills"] != surveyorSystem {
				t.Errorf("the surveyor answered %q, its tool ran %d times, under the system prompt %q; want its answer, once, under its own prompt, handed the context",
					parts[0], records.Load(), systems["Context:\nthe north\n\nTask:\nsurvey the hills"])
			}
			if parts[1] != "wrote: write it up" || writes.Load() != 1 {
				t.Errorf("the writer answered %q after %d calls, want its factory's agent's answer, once", parts[1], writes.Load())
			}
			for _, want := range []string{`no sub-agent named "nobody"`, `"surveyor", "writer", "dreamer"`, "leave agent out to fork yourself"} {
				if !strings.Contains(parts[2], want) {
					t.Errorf("a spawn naming no member read %q, want it to say %q", parts[2], want)
				}
			}
			if !strings.Contains(parts[3], "fix the Spec's Roster") {
				t.Errorf("a spawn of a React member read %q, want it refused, saying to fix the Roster", parts[3])
			}
			if parts[4] != "plan forked" || systems["fork the plan"] == surveyorSystem {
				t.Errorf("a spawn naming no agent read %q, want a fork of the lead", parts[4])
			}
			var started []string
			for _, e := range rec.events {
				if e.Type == event.SubagentStarted {
					started = append(started, e.Name)
				}
			}
			slices.Sort(started)
			want := []string{subagent.DefaultForkName, "surveyor", "writer"}
			if deny {
				want = []string{subagent.DefaultForkName, "writer"}
			}
			if !slices.Equal(started, want) {
				t.Errorf("the sub-agents started under the names %v, want %v", started, want)
			}
			i := slices.IndexFunc(offered, func(d provider.ToolDef) bool { return d.Name == SpawnToolName })
			if i < 0 {
				t.Fatalf("the lead was offered %v, want spawn_subagent", offered)
			}
			var params struct {
				Properties struct {
					Agent struct {
						Enum []string `json:"enum"`
					} `json:"agent"`
				} `json:"properties"`
			}
			if err := json.Unmarshal(offered[i].Parameters, &params); err != nil || !slices.Equal(params.Properties.Agent.Enum, []string{"surveyor", "writer", "dreamer"}) {
				t.Errorf("spawn_subagent's agent parameter lists %v (%v), want the roster's names", params.Properties.Agent.Enum, err)
			}
			if !strings.Contains(offered[i].Description, "- surveyor: Surveys land.") {
				t.Errorf("spawn_subagent's description is %q, want each member described", offered[i].Description)
			}
			_, wrote := writer.total()
			if calls, spent := m.total(); out.TotalUsage() != spent.Add(wrote) {
				t.Errorf("%d model calls costing %+v, and the writer's %+v; the lead reported %+v", calls, spent, wrote, out.TotalUsage())
			}
		})
	}
}

// A member of the roster started in the background, by the model and by
// a program, is a job like a fork: listed under its name, sent a message
// it reads once at its next step boundary, waited for, its usage counted
// once; its side effects run once each. A program's start of a name not
// on the roster, or of a Factory member, is refused, saying what to do.
// With models that name their calls afresh, not at all, or from call_0.
func TestRosterMemberInTheBackground(t *testing.T) {
	inEachIDMode(t, rosterInTheBackground)
}

func rosterInTheBackground(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const note = "mind the river"
	var n, holds, records, gates atomic.Int64
	holding, open := make(chan struct{}), make(chan struct{})
	gating, letLead := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	systems := map[string]string{}
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		task := firstUserOf(req)
		if strings.HasPrefix(task, "survey ") {
			mu.Lock()
			systems[task] = req.System
			mu.Unlock()
			switch len(rs) {
			case 0:
				return call("hold", `{}`)
			case 1:
				return call("record", `{}`)
			}
			heard := 0
			for _, msg := range req.Messages {
				if msg.Role == provider.RoleUser {
					heard += strings.Count(msg.Content, note)
				}
			}
			return provider.AssistantMessage(fmt.Sprintf("%s done, heard %d", task, heard)), nil
		}
		switch len(rs) {
		case 0:
			return call(SpawnToolName, `{"task":"survey the hills","agent":"surveyor","background":true}`)
		case 1:
			return call("gate", `{}`)
		case 2:
			return call(subagent.JobsToolName, `{"action":"wait","timeout_seconds":300}`)
		}
		return provider.AssistantMessage("lead: " + rs[2]), nil
	}}
	record := tool.Must(tool.New("record", "Records.", func(context.Context, struct{}) (string, error) {
		records.Add(1)
		return "recorded", nil
	}))
	reg, err := tool.NewRegistry(record, holdOn("hold", &holds, holding, open), holdOn("gate", &gates, gating, letLead))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-roster-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	tree := "roster-" + queue
	spec := rosterSpec(true)
	spec.Tools = []string{"gate"}
	spec.Roster[0].Agent.Tools = []string{"hold", "record"}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: spec, Text: "plan the survey"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []chan struct{}{holding, gating} {
		select {
		case <-c:
		case <-ctx.Done():
			t.Fatal("the member's job, or the lead, never reached its step that holds on")
		}
	}
	for _, bad := range []struct {
		task subagent.Task
		want string
	}{
		{subagent.Task{Task: "survey", Agent: "nobody"}, `no sub-agent named "nobody"`},
	} {
		if _, err := StartJob(ctx, c, tree, bad.task); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("starting %+v: %v, want it refused saying %q", bad.task, err, bad.want)
		}
	}
	st, err := StartJob(ctx, c, tree, subagent.Task{Task: "survey the dales", Agent: "surveyor"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Agent != "surveyor" || st.ID != "job_2" {
		t.Errorf("the job a program started is %+v, want job_2 of the surveyor", st)
	}
	jobs, err := Jobs(ctx, c, tree)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].Agent != "surveyor" || jobs[0].Task != "survey the hills" {
		t.Fatalf("the run lists %+v, want the surveyor's two jobs", jobs)
	}
	if _, err := SendToJob(ctx, c, tree, jobs[0].ID, note); err != nil {
		t.Fatal(err)
	}
	close(open)
	close(letLead)
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"survey the hills done, heard 1", "survey the dales done, heard 0"} {
		if !strings.Contains(out.Answer, want) {
			t.Errorf("the lead answered %q, want it to read %q", out.Answer, want)
		}
	}
	mu.Lock()
	for task, system := range systems {
		if system != surveyorSystem {
			t.Errorf("%q ran under the system prompt %q, want the surveyor's", task, system)
		}
	}
	mu.Unlock()
	if holds.Load() != 2 || records.Load() != 2 {
		t.Errorf("the jobs' steps ran hold %d and record %d times, want each twice: once a job", holds.Load(), records.Load())
	}
	if calls, spent := m.total(); calls != 10 || out.TotalUsage() != spent {
		t.Errorf("%d model calls costing %+v, the lead reported %+v; want 10 (4 the lead's, 3 each job's), each counted once", calls, spent, out.TotalUsage())
	}
	replays(ctx, t, c, tree, "the lead's history does not replay")
}
