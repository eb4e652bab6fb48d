package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A spawn past Spec.MaxSpawns is counted in RunOutput.Refused, as
// agent.Output.Refused counts it in process, whether or not the workers
// have a policy (which checks a step's calls together before they
// start); before, Refused stayed 0 on Temporal.
func TestRefusedSpawnsAreCountedOnTemporal(t *testing.T) {
	pol, err := policy.New(denyTask("nothing"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pol  *policy.Policy
	}{{"without a policy", nil}, {"with a policy", pol}} {
		t.Run(tc.name, func(t *testing.T) {
			p := fanOut(3)
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Policy: tc.pol})
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, MaxSpawns: 2}, Text: "do it"})
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			if out.Refused != 1 {
				t.Errorf("RunOutput.Refused %d: want 1, the third spawn past Spec.MaxSpawns of 2", out.Refused)
			}
		})
	}
}

// A child that had a spawn refused (past Spec.MaxSpawns) and then failed, in the foreground or
// as a background job its lead waits for, still counts the refusal in its
// lead's RunOutput.Refused: its error carries the count as it carries its
// usage. Before, the count was lost with the child's output.
func TestFailedChildsRefusalsAreCountedOnTemporal(t *testing.T) {
	for _, background := range []bool{false, true} {
		for _, mode := range policyIDModes {
			t.Run(fmt.Sprint("background=", background, "/", mode.name), func(t *testing.T) {
				var n atomic.Int64
				p := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
					rs := resultsOf(req)
					switch task := firstUserOf(req); {
					case task == "g":
						return provider.AssistantMessage("g done"), nil
					case task == "part 1" && len(rs) == 0:
						// Two spawns where Spec.MaxSpawns lets a run make
						// one: the second is refused, and counted.
						return provider.AssistantMessage("",
							provider.ToolCall{ID: mode.id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"g"}`)},
							provider.ToolCall{ID: mode.id(n.Add(1), 1), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"g"}`)}), nil
					case task == "part 1":
						return provider.Message{}, &provider.Error{Provider: "m", StatusCode: http.StatusBadRequest, Kind: provider.KindBadRequest, Message: "no such model"}
					case len(rs) == 0 && background:
						return provider.AssistantMessage("", provider.ToolCall{ID: mode.id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"part 1","background":true}`)}), nil
					case len(rs) == 1 && background:
						return provider.AssistantMessage("", provider.ToolCall{ID: mode.id(n.Add(1), 0), Name: subagent.JobsToolName,
							Arguments: json.RawMessage(`{"action":"wait","job_id":"` + jobIDOf(rs[0]) + `","timeout_seconds":60}`)}), nil
					case len(rs) == 0:
						return provider.AssistantMessage("", provider.ToolCall{ID: mode.id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"part 1"}`)}), nil
					}
					return provider.AssistantMessage("the part failed"), nil
				}}
				env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
				env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, MaxDepth: 2, MaxSpawns: 1}, Text: "do it"})
				var out RunOutput
				if err := env.GetWorkflowResult(&out); err != nil {
					t.Fatal(err)
				}
				if out.Answer != "the part failed" || out.Refused != 1 {
					t.Errorf("the lead answered %q, RunOutput.Refused %d: want the part failed, and its child's refused spawn counted", out.Answer, out.Refused)
				}
			})
		}
	}
}

// refusalsIn is the values of the deputy.refused events rec was sent, in
// order.
func refusalsIn(t *testing.T, rec *recorder) []map[string]string {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []map[string]string
	for _, e := range rec.events {
		if e.Type == event.Custom && e.Name == subagent.RefusedEvent {
			var v map[string]string
			if err := json.Unmarshal(e.Value, &v); err != nil {
				t.Error(err)
			}
			if e.SubagentRunID != "" {
				t.Errorf("a refusal was published as sub-agent %s's, want the lead's", e.SubagentRunID)
			}
			out = append(out, v)
		}
	}
	return out
}

// A model's spawn past Spec.MaxSpawns publishes one deputy.refused event
// of reason max_spawns, as subagent.WithMaxSpawns refuses it in process:
// for the call whose start the run published, named as the fork it would
// have started, with what the model read; and is counted in
// RunOutput.Refused. So whether the spawns went on at once or once a
// person approved them (a rule asks before each). Before, on Temporal,
// it was counted and published nothing. With models that name their
// calls afresh, not at all, or from call_0.
func TestMaxSpawnsRefusalIsPublishedOnTemporal(t *testing.T) {
	for _, asked := range []bool{false, true} {
		for _, mode := range policyIDModes {
			t.Run(fmt.Sprint("asked=", asked, "/", mode.name), func(t *testing.T) { maxSpawnsPublished(t, mode.id, asked) })
		}
	}
}

func maxSpawnsPublished(t *testing.T, id func(n int64, i int) string, asked bool) {
	var n atomic.Int64
	p := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		task, rs := firstUserOf(req), resultsOf(req)
		switch {
		case strings.HasPrefix(task, "part "):
			return provider.AssistantMessage("done: " + task), nil
		case len(rs) == 0:
			calls := make([]provider.ToolCall, 3)
			for i := range calls {
				calls[i] = provider.ToolCall{ID: id(n.Add(1), i), Name: SpawnToolName, Arguments: json.RawMessage(fmt.Sprintf(`{"task":"part %d"}`, i))}
			}
			return provider.AssistantMessage("", calls...), nil
		}
		return provider.AssistantMessage(strings.Join(rs, " | ")), nil
	}}
	hub := NewHub()
	rt := &Runtime{Providers: map[string]provider.Provider{"m": p}, Events: hub}
	if asked {
		pol, err := policy.New(policy.AskBefore("approve-spawns", SpawnToolName))
		if err != nil {
			t.Fatal(err)
		}
		rt.Policy = pol
	}
	env := newEnv(t, rt)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "max-spawns-tree"})
	var rec recorder
	defer hub.Subscribe(event.WithSink(context.Background(), &rec), "max-spawns-tree")()
	if asked {
		everyTick(env, time.Second, func() bool {
			var pending []tool.Interrupt
			if !queried(env, InterruptsQuery, &pending) || len(pending) < 3 {
				return false
			}
			answers := make([]tool.Answer, len(pending))
			for i, it := range pending {
				answers[i] = tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}
			}
			env.UpdateWorkflow(AnswerUpdate, "answers", noCallbacks{t}, answers)
			return true
		})
	}
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, MaxSpawns: 2}, Text: "do it"})
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	var refusedCall, read string
	for _, m := range out.Messages {
		if m.Role == provider.RoleTool && strings.Contains(m.Content, subagent.ErrMaxSpawns.Error()) {
			refusedCall, read = m.ToolCallID, m.Content
		}
	}
	if read == "" || strings.Count(out.Answer, "done: part") != 2 {
		t.Fatalf("the lead answered %q: want two parts done and a spawn refused past Spec.MaxSpawns", out.Answer)
	}
	if out.Refused != 1 {
		t.Errorf("RunOutput.Refused %d, want 1", out.Refused)
	}
	rs := refusalsIn(t, &rec)
	if len(rs) != 1 {
		t.Fatalf("refusal events %+v, want one, the spawn past Spec.MaxSpawns", rs)
	}
	want := map[string]string{"reason": "max_spawns", "toolCallId": refusedCall, "name": subagent.DefaultForkName, "message": read}
	if !maps.Equal(rs[0], want) {
		t.Errorf("the refusal event is %+v, want %+v", rs[0], want)
	}
	started := false
	rec.mu.Lock()
	for _, e := range rec.events {
		started = started || e.Type == event.ToolCallStart && e.ToolCallID == rs[0]["toolCallId"] && e.ToolCallName == SpawnToolName
	}
	rec.mu.Unlock()
	if !started {
		t.Errorf("the refusal names call %q, whose start was not published", rs[0]["toolCallId"])
	}
}

// A program's start past Spec.MaxSpawns, or in a run with nothing left of
// its TokenLimit to give a job, is refused as subagent.Jobs.Start refuses
// it in process: with subagent.ErrMaxSpawns or ErrNoBudget, one
// deputy.refused event of reason max_spawns or no_budget (no call, the
// fork's name, what the program read), counted in RunOutput.Refused.
// Before, the first published nothing and the second was refused by the
// update's validator, which can neither publish nor count. With models
// that name their calls afresh, not at all, or from call_0.
func TestGoStartRefusalsArePublished(t *testing.T) {
	for _, reason := range []string{"max_spawns", "no_budget"} {
		for _, mode := range policyIDModes {
			t.Run(reason+"/"+mode.name, func(t *testing.T) { goStartRefusalPublished(t, mode.id, reason) })
		}
	}
}

func goStartRefusalPublished(t *testing.T, id func(n int64, i int) string, reason string) {
	const moons = "count the moons"
	var paid, n atomic.Int64
	m := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		if firstUserOf(req) == moons {
			return provider.AssistantMessage("moons: 3"), nil
		}
		if rs := resultsOf(req); len(rs) > 0 {
			return provider.AssistantMessage("lead: " + rs[0]), nil
		}
		return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: "pay", Arguments: json.RawMessage(`{}`)}), nil
	}}
	reg, err := tool.NewRegistry(payer(&paid))
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{Name: "lead", Provider: "m", Tools: []string{"pay"}, Spawn: true, Background: true}
	wantErr := subagent.ErrMaxSpawns
	if reason == "max_spawns" {
		spec.MaxSpawns = 1
	} else {
		// Each start takes half of what is left, its share held back
		// until the job is collected: a few starts leave nothing.
		spec.TokenLimit, spec.MaxBackground, wantErr = 20_000, 64, subagent.ErrNoBudget
	}
	hub := NewHub()
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Events: hub})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "go-refused-tree"})
	var rec recorder
	defer hub.Subscribe(event.WithSink(context.Background(), &rec), "go-refused-tree")()
	var asked []tool.Interrupt
	var start, wait goUpdate
	var refusal error
	starts, state := 0, 0
	// While the lead waits for a person, the program starts jobs until
	// one is refused, then collects them; then the person answers.
	everyTick(env, time.Second, func() bool {
		switch state {
		case 0:
			if queried(env, InterruptsQuery, &asked) && len(asked) > 0 {
				state = 1
			}
		case 1:
			if starts > 0 {
				done, err := start.outcome()
				if !done {
					return false
				}
				if err != nil || starts == 30 {
					refusal, state = err, 2
					env.UpdateWorkflow(JobsWaitUpdate, "wait", wait.callbacks(), subagent.WaitFor{Timeout: time.Minute})
					return false
				}
			}
			starts++
			start = goUpdate{}
			env.UpdateWorkflow(JobStartUpdate, fmt.Sprint("start-", starts), start.callbacks(), subagent.Task{Task: moons})
		case 2:
			if done, _ := wait.outcome(); done {
				env.UpdateWorkflow(AnswerUpdate, "answer", noCallbacks{t}, []tool.Answer{{InterruptID: asked[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}})
				return true
			}
		}
		return false
	})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "go"})
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if out.Answer != "lead: paid" || paid.Load() != 1 {
		t.Errorf("the lead answered %q, paid %d times: want it paid once", out.Answer, paid.Load())
	}
	if refusal == nil || !strings.Contains(refusal.Error(), wantErr.Error()) {
		t.Fatalf("the program's start %d came to %v, want it refused with %v", starts, refusal, wantErr)
	}
	if got := wait.waited(t); len(got) != starts-1 {
		t.Errorf("the program collected %d jobs, want the %d it started", len(got), starts-1)
	}
	if out.Refused != 1 {
		t.Errorf("RunOutput.Refused %d, want 1: the program's last start", out.Refused)
	}
	rs := refusalsIn(t, &rec)
	if len(rs) != 1 {
		t.Fatalf("refusal events %+v, want one, the program's last start", rs)
	}
	if v := rs[0]; v["reason"] != reason || v["toolCallId"] != "" || v["name"] != subagent.DefaultForkName || v["message"] == "" || !strings.Contains(refusal.Error(), v["message"]) {
		t.Errorf("the refusal event is %+v, the program read %q: want reason %s, no call, the fork's name and what the program read", v, refusal, reason)
	}
}

// The same on a real server, through StartJob and WaitJobs: a lead's
// spawn past Spec.MaxSpawns and a program's start past it, and, in
// another lead, a program's start with nothing left of its TokenLimit,
// each publish one deputy.refused event of its reason and count in the
// lead's output; the leads' histories replay. With models that name their
// calls afresh, not at all, or from call_0.
func TestRefusalsArePublishedOnServer(t *testing.T) {
	inEachIDMode(t, refusalsPublishedOnServer)
}

func refusalsPublishedOnServer(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var n, holds, pauses atomic.Int64
	holding, release := make(chan struct{}), make(chan struct{})
	pausing, resume := make(chan struct{}), make(chan struct{})
	m := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		task, rs := firstUserOf(req), resultsOf(req)
		switch {
		case strings.HasPrefix(task, "part "):
			return provider.AssistantMessage("done: " + task), nil
		case task == "spawn" && len(rs) == 0:
			calls := make([]provider.ToolCall, 3)
			for i := range calls {
				calls[i] = provider.ToolCall{ID: id(n.Add(1), i), Name: SpawnToolName, Arguments: json.RawMessage(fmt.Sprintf(`{"task":"part %d"}`, i))}
			}
			return provider.AssistantMessage("", calls...), nil
		case task == "spawn" && len(rs) == 3:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
		case task == "pause" && len(rs) == 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: "pause", Arguments: json.RawMessage(`{}`)}), nil
		}
		return provider.AssistantMessage("lead: " + strings.Join(rs, " | ")), nil
	}}
	reg, err := tool.NewRegistry(holdOn("hold", &holds, holding, release), holdOn("pause", &pauses, pausing, resume))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-refusals-%d", time.Now().UnixNano())
	hub := NewHub()
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Events: hub})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// A lead holds on in a step (held), while the program acts; then it
	// goes on (release) and answers.
	lead := func(tree, text string, spec Spec, held, release chan struct{}, program func()) (RunOutput, []map[string]string) {
		t.Helper()
		var rec recorder
		defer hub.Subscribe(event.WithSink(ctx, &rec), tree)()
		spec.Name, spec.Provider, spec.Tools, spec.Spawn, spec.Background = "lead", "m", []string{"hold", "pause"}, true, true
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: spec, Text: text})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-held:
		case <-ctx.Done():
			t.Fatal("the lead never reached its step that holds on")
		}
		program()
		close(release)
		var out RunOutput
		if err := run.Get(ctx, &out); err != nil {
			t.Fatal(err)
		}
		replays(ctx, t, c, tree, "the lead's history does not replay")
		return out, refusalsIn(t, &rec)
	}
	out, rs := lead("spawns-"+queue, "spawn", Spec{MaxSpawns: 2}, holding, release, func() {
		if _, err := StartJob(ctx, c, "spawns-"+queue, subagent.Task{Task: "part 3"}); err == nil || !strings.Contains(err.Error(), subagent.ErrMaxSpawns.Error()) {
			t.Errorf("the program's start past Spec.MaxSpawns came to %v, want it refused", err)
		}
	})
	if len(rs) != 2 || rs[0]["reason"] != "max_spawns" || rs[0]["toolCallId"] == "" || rs[1]["reason"] != "max_spawns" || rs[1]["toolCallId"] != "" || out.Refused != 2 {
		t.Errorf("refusal events %+v, RunOutput.Refused %d: want two of reason max_spawns, the model's spawn's and the program's start's, each counted", rs, out.Refused)
	}
	out, rs = lead("budget-"+queue, "pause", Spec{TokenLimit: 20_000, MaxBackground: 64}, pausing, resume, func() {
		for i := range 30 {
			_, err := StartJob(ctx, c, "budget-"+queue, subagent.Task{Task: "part " + fmt.Sprint(i)})
			if err != nil {
				if !strings.Contains(err.Error(), subagent.ErrNoBudget.Error()) {
					t.Errorf("the program's start %d came to %v, want it refused with %v", i+1, err, subagent.ErrNoBudget)
				}
				break
			}
		}
		if _, err := WaitJobs(ctx, c, "budget-"+queue, subagent.WaitFor{Timeout: time.Minute}); err != nil {
			t.Error(err)
		}
	})
	if len(rs) != 1 || rs[0]["reason"] != "no_budget" || out.Refused != 1 {
		t.Errorf("refusal events %+v, RunOutput.Refused %d: want one of reason no_budget, the program's last start, counted", rs, out.Refused)
	}
}
