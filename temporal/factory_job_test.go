package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A roster member that is a factory's agent (which is how an A2A remote,
// or any agent built in Go, joins a tree on Temporal) is a background job
// like any other: the lead's spawn gets its id at once; the two messages
// the lead sends while the member's agent waits on a tool reach the agent
// at its next step boundary, in the order sent, once each, and their
// receipts say so; the lead waits for it and reads its answer. The same
// member started from Go (StartJob) and cancelled as it waits (CancelJob)
// hands back a partial report with its model call counted. What the lead
// reports spent is what both models billed. Before, both starts were
// refused ("runs a factory's agent in one activity").
func TestFactoryMemberRunsAsAJobOnTemporal(t *testing.T) {
	inEachIDMode(t, func(t *testing.T, c client.Client, id func(n int64, i int) string) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var n atomic.Int64
		call := func(i int, name, args string) provider.ToolCall {
			return provider.ToolCall{ID: id(n.Add(1), i), Name: name, Arguments: json.RawMessage(args)}
		}
		holding := make(chan string, 2)
		release := make(chan struct{})
		var holds atomic.Int64
		hold := tool.Func{Def: tool.Definition{Name: "hold", Description: "Waits for the drafts.", Parameters: json.RawMessage(`{"type":"object"}`)},
			Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
				holds.Add(1)
				holding <- c.ID
				select {
				case <-release:
					return tool.Result{Content: "the drafts are in"}, nil
				case <-ctx.Done():
					return tool.Result{}, ctx.Err()
				}
			}}
		// The member's model: it waits on hold, then says what it was
		// told, in the order it read it.
		var mu sync.Mutex
		var heardAt []int // the step of each request that held a note
		writer := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
			var told []string
			for _, m := range req.Messages {
				if m.Role == provider.RoleUser {
					for _, note := range []string{"note A", "note B"} {
						if strings.Contains(m.Content, note) {
							told = append(told, note)
						}
					}
				}
			}
			if len(told) > 0 {
				mu.Lock()
				heardAt = append(heardAt, len(resultsOf(req))+1)
				mu.Unlock()
			}
			if len(resultsOf(req)) == 0 {
				return provider.AssistantMessage("", call(0, "hold", `{}`)), nil
			}
			return provider.AssistantMessage(firstUserOf(req) + ": done, told " + strings.Join(told, ", ")), nil
		}}
		lead := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
			rs := resultsOf(req)
			job := ""
			if len(rs) > 0 {
				job = jobIDOf(rs[0])
			}
			switch len(rs) {
			case 0:
				return provider.AssistantMessage("", call(0, SpawnToolName, `{"task":"write the intro","agent":"writer","background":true}`)), nil
			case 1:
				return provider.AssistantMessage("", call(0, subagent.JobsToolName, `{"action":"send","job_id":"`+job+`","message":"note A"}`)), nil
			case 2:
				return provider.AssistantMessage("", call(0, subagent.JobsToolName, `{"action":"send","job_id":"`+job+`","message":"note B"}`)), nil
			case 3:
				return provider.AssistantMessage("", call(0, subagent.JobsToolName, `{"action":"wait","job_id":"`+job+`","timeout_seconds":300}`)), nil
			}
			return provider.AssistantMessage("lead: " + rs[3]), nil
		}}
		hub := NewHub()
		rt := &Runtime{Providers: map[string]provider.Provider{"m": lead}, Events: hub, Factories: map[string]subagent.Factory{
			"writer": func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(writer, agent.WithName("writer"), agent.WithTools(hold))
			},
		}}
		queue := fmt.Sprintf("deputy-factory-job-%d", time.Now().UnixNano())
		w := worker.New(c, queue, worker.Options{})
		Register(w, rt)
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		tree := "factory-job-" + queue
		spec := Spec{Name: "lead", Provider: "m", Spawn: true, Background: true, Roster: []SubAgent{{Name: "writer", Description: "Writes.", Factory: "writer"}}}
		var rec recorder
		defer hub.Subscribe(event.WithSink(context.Background(), &rec), tree)()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: spec, Text: "write the piece"})
		if err != nil {
			t.Fatal(err)
		}
		next := func(what string) {
			t.Helper()
			select {
			case <-holding:
			case <-ctx.Done():
				t.Fatalf("%s never began its work", what)
			}
		}
		next("the lead's job of the writer")

		// From Go: started, then cancelled as it waits.
		st, err := StartJob(ctx, c, tree, subagent.Task{Task: "write the outro", Agent: "writer"})
		if err != nil {
			t.Fatal(err)
		}
		next("the program's job of the writer")
		st, err = CancelJob(ctx, c, tree, st.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != subagent.JobCancelled || st.Usage.Requests != 1 || st.Agent != "writer" {
			t.Errorf("the cancelled job is %+v, want the writer's, cancelled with its one model call counted", st)
		}

		// Both notes are on their way before the lead's job goes on.
		for {
			jobs, err := Jobs(ctx, c, tree)
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) > 0 && len(jobs[0].Messages) == 2 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the lead never sent its two notes: %+v", jobs)
			case <-time.After(50 * time.Millisecond):
			}
		}
		close(release)
		var out RunOutput
		if err := run.Get(ctx, &out); err != nil {
			t.Fatal(err)
		}
		if want := "lead: write the intro: done, told note A, note B"; out.Answer != want {
			t.Errorf("the lead answered %q, want %q: each note once, in order", out.Answer, want)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(heardAt) != 1 || heardAt[0] != 2 {
			t.Errorf("the writer read the notes in the requests of steps %v, want in step 2 alone: at its step boundary, once", heardAt)
		}
		jobs, err := Jobs(ctx, c, tree)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) != 2 || jobs[0].State != subagent.JobDone || jobs[1].State != subagent.JobCancelled {
			t.Fatalf("the run's jobs are %+v, want the lead's done and the program's cancelled", jobs)
		}
		for i, r := range jobs[0].Messages {
			if r.State != subagent.MessageDelivered || r.Step != 2 || r.Seq != i+1 {
				t.Errorf("receipt %d is %+v, want delivered before step 2, number %d", i, r, i+1)
			}
		}
		lc, lu := lead.total()
		wc, wu := writer.total()
		if lc != 5 || wc != 3 || out.TotalUsage() != lu.Add(wu) {
			t.Errorf("the lead made %d model calls and the writer %d, billing %+v; the lead reports %+v: want 5 and 3, each counted once",
				lc, wc, lu.Add(wu), out.TotalUsage())
		}
		if holds.Load() != 2 {
			t.Errorf("hold ran %d times, want once a job", holds.Load())
		}

		// The stream tells each job's start once, each message it took,
		// and its end: the lead's answered, the program's cancelled.
		rec.mu.Lock()
		evs := append([]event.Event{{Type: event.RunStarted}}, rec.events...)
		rec.mu.Unlock()
		fromGo := tree + "/go.1-" + SpawnToolName
		var modelsJobs []event.Event // (a program's job has no spawning call, which the check asks for)
		for _, e := range evs {
			if e.SubagentRunID != fromGo {
				modelsJobs = append(modelsJobs, e)
			}
		}
		for _, p := range eventcheck.Check(append(modelsJobs, event.Event{Type: event.RunFinished}), eventcheck.Options{Background: true}) {
			t.Error(p)
		}
		ends := map[string][]string{} // a job's sub-agent run id → how it started and ended
		for _, e := range evs {
			if e.Type == event.Custom && e.Name == subagent.JobDeliveredEvent {
				var r struct {
					subagent.Receipt
					RunID string `json:"subagent_run_id"`
				}
				if err := json.Unmarshal(e.Value, &r); err != nil {
					t.Fatal(err)
				}
				ends[r.RunID] = append(ends[r.RunID], fmt.Sprintf("delivered %d at step %d", r.Seq, r.Step))
				continue
			}
			switch e.Type {
			case event.SubagentStarted:
				ends[e.SubagentRunID] = append(ends[e.SubagentRunID], "started")
			case event.SubagentFinished:
				ends[e.SubagentRunID] = append(ends[e.SubagentRunID], "finished")
			case event.SubagentError:
				ends[e.SubagentRunID] = append(ends[e.SubagentRunID], "error "+e.Code)
			}
		}
		want := map[string][]string{tree + "/0.0-" + SpawnToolName: {"started", "delivered 1 at step 2", "delivered 2 at step 2", "finished"}, fromGo: {"started", "error cancelled"}}
		if fmt.Sprint(ends) != fmt.Sprint(want) {
			t.Errorf("the jobs' sub-agents began and ended %v, want %v", ends, want)
		}
	})
}

// A factory's job is bounded as an agent's job is: past the Spec's
// JobTokens, or its JobTime, it ends with a partial report that names the
// limit, and what it spent counts in the lead's usage.
func TestFactoryJobStopsAtItsLimits(t *testing.T) {
	for _, c := range []struct {
		name   string
		limits func(*Spec)
		want   string
	}{
		{"tokens", func(s *Spec) { s.JobTokens = 400 }, "stopped at its limit"},
		{"time", func(s *Spec) { s.JobTime = time.Second }, "ran past its time of 1s (Spec.JobTime)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dig := tool.Func{Def: tool.Definition{Name: "dig", Description: "Digs.", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
					if c.name == "time" {
						<-ctx.Done() // past its time
						return tool.Result{}, ctx.Err()
					}
					return tool.Result{Content: strings.Repeat("soil ", 40)}, nil
				}}
			writer := &script{fn: func(context.Context, int, provider.Request) (provider.Message, error) {
				return provider.AssistantMessage("digging on", provider.ToolCall{ID: "d", Name: "dig", Arguments: json.RawMessage(`{}`)}), nil
			}}
			lead := leadOfJob("dig deep", "digger")
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": lead}, Factories: map[string]subagent.Factory{
				"digger": func(context.Context, json.RawMessage) (agent.Agent, error) {
					return agent.NewReact(writer, agent.WithName("digger"), agent.WithTools(dig), agent.WithMaxSteps(1000))
				},
			}})
			spec := Spec{Name: "lead", Provider: "m", Spawn: true, Background: true, Roster: []SubAgent{{Name: "digger", Description: "Digs.", Factory: "digger"}}}
			c.limits(&spec)
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "dig"})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.Answer, c.want) {
				t.Errorf("the lead read %q, want the job's partial report saying %q", out.Answer, c.want)
			}
			_, lu := lead.total()
			wc, wu := writer.total()
			if wc == 0 || out.TotalUsage() != lu.Add(wu) {
				t.Errorf("the job made %d model calls; billed %+v in all, the lead reports %+v: want each counted once", wc, lu.Add(wu), out.TotalUsage())
			}
			if c.name == "tokens" && wu.Tokens() > 400+wu.Tokens()/int64(wc) {
				t.Errorf("the job spent %d tokens in %d calls under a limit of 400", wu.Tokens(), wc)
			}
		})
	}
}

// A factory's agent, in the foreground or as a job, whose worker stops
// while the agent waits on a tool goes on on another worker from where it
// was: its activity runs again and replays the journal its workflow kept,
// so its side effect is made once, each model answer is paid once, the
// lead's message reaches a job once, before the step its receipt names,
// and the lead reports what was billed — whatever ids the models give
// their calls. Before, the agent ran again from its start, paying its
// answers twice, making its side effect twice, and leaving what the first
// attempt spent out of the lead's usage.
func TestFactoryAgentSurvivesAWorkerRestart(t *testing.T) {
	for _, bg := range []bool{true, false} {
		t.Run(fmt.Sprintf("background=%v", bg), func(t *testing.T) {
			inEachIDMode(t, func(t *testing.T, c client.Client, id func(n int64, i int) string) {
				factoryAgentSurvivesRestart(t, c, id, bg)
			})
		})
	}
}

// cheapScript is a script whose provider's default model is "cheap": the
// model that answers a request naming none.
type cheapScript struct{ *script }

func (cheapScript) Model() string { return "cheap" }

func factoryAgentSurvivesRestart(t *testing.T, c client.Client, id func(n int64, i int) string, bg bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const task, note = "survey the hills", "list the rivers too"
	var n atomic.Int64
	call := func(name string) provider.ToolCall {
		return provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(`{}`)}
	}
	var mu sync.Mutex
	var saw []int // per request of the writer's: how many times it holds the note
	writer := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		heard := 0
		for _, m := range req.Messages {
			if m.Role == provider.RoleUser {
				heard += strings.Count(m.Content, note)
			}
		}
		mu.Lock()
		saw = append(saw, heard)
		mu.Unlock()
		switch len(resultsOf(req)) {
		case 0:
			return provider.AssistantMessage("surveying", call("record")), nil
		case 1:
			return provider.AssistantMessage("", call("hold")), nil
		}
		return provider.AssistantMessage(fmt.Sprintf("hills surveyed, %q heard %d times", note, heard)), nil
	}}
	lead := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		if !bg {
			if len(rs) == 0 {
				return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + task + `","agent":"surveyor"}`)}), nil
			}
			return provider.AssistantMessage("lead: " + rs[0]), nil
		}
		switch len(rs) {
		case 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + task + `","agent":"surveyor","background":true}`)}), nil
		case 1:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"send","job_id":"` + jobIDOf(rs[0]) + `","message":"` + note + `"}`)}), nil
		case 2:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","job_id":"` + jobIDOf(rs[0]) + `","timeout_seconds":300}`)}), nil
		}
		return provider.AssistantMessage("lead: " + rs[2]), nil
	}}
	var recorded, holds, stopped, held atomic.Int64
	record := tool.Must(tool.New("record", "Records.", func(context.Context, struct{}) (string, error) {
		recorded.Add(1)
		return "recorded", nil
	}))
	holding := make(chan struct{})
	before := blocking(t, "hold", &holds, &stopped, holding)
	after := tool.Must(tool.New("hold", "Holds on.", func(context.Context, struct{}) (string, error) {
		held.Add(1)
		return "held", nil
	}))
	// Both models' replies name no model: each call is counted, and
	// priced, under its provider's default model, the cheaper one, in
	// both attempts.
	cheap := provider.Price{Input: 1e-6, Output: 2e-6}
	prices, err := provider.NewPrices(map[string]provider.Price{"cheap": cheap, "dear": {Input: 1e-4, Output: 2e-4}})
	if err != nil {
		t.Fatal(err)
	}
	runtimeWith := func(hold tool.Tool) *Runtime {
		return &Runtime{Providers: map[string]provider.Provider{"m": cheapScript{lead}}, Prices: prices, Factories: map[string]subagent.Factory{
			"surveyor": func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(cheapScript{writer}, agent.WithName("surveyor"), agent.WithTools(record, hold))
			},
		}}
	}
	queue := fmt.Sprintf("deputy-factory-restart-%d", time.Now().UnixNano())
	tree := "factory-restart-" + queue
	w1 := worker.New(c, queue, worker.Options{})
	Register(w1, runtimeWith(before))
	if err := w1.Start(); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Name: "lead", Provider: "m", Spawn: true, Background: bg, Roster: []SubAgent{{Name: "surveyor", Description: "Surveys.", Factory: "surveyor"}}}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: spec, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("the job never reached its step that holds on")
	}
	w1.Stop() // the job's agent is in the middle of a tool call
	w2 := worker.New(c, queue, worker.Options{})
	Register(w2, runtimeWith(after))
	if err := w2.Start(); err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	heard, leadCalls := 1, 4
	if !bg {
		heard, leadCalls = 0, 2
	}
	if want := fmt.Sprintf("lead: hills surveyed, %q heard %d times", note, heard); out.Answer != want {
		t.Errorf("the lead answered %q, want %q", out.Answer, want)
	}
	if recorded.Load() != 1 || holds.Load() != 1 || stopped.Load() != 1 || held.Load() != 1 {
		t.Errorf("recorded %d times, held on %d times before the stop (%d ended by it) and %d after; want 1, 1, 1, 1",
			recorded.Load(), holds.Load(), stopped.Load(), held.Load())
	}
	wc, wu := writer.total()
	lc, lu := lead.total()
	if wc != 3 || lc != leadCalls || out.TotalUsage() != lu.Add(wu) {
		t.Errorf("the writer's model was asked %d times and the lead's %d, billing %+v; the lead reports %+v: want 3 and %d, each paid and counted once",
			wc, lc, lu.Add(wu), out.TotalUsage(), leadCalls)
	}
	if billed := costOfUsage(cheap, lu.Add(wu)); math.Abs(out.Cost-billed) > 1e-12 || len(out.Models) != 1 || out.Models[0].Model != "cheap" || math.Abs(out.Models[0].Cost-billed) > 1e-12 {
		t.Errorf("the lead reports $%.8f, by model %+v; the models billed $%.8f at the default model's price", out.Cost, out.Models, billed)
	}
	if !bg {
		return
	}
	jobs, err := Jobs(ctx, c, tree)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(jobs) != 1 || len(jobs[0].Messages) != 1 || jobs[0].Messages[0].State != subagent.MessageDelivered {
		t.Fatalf("the run's jobs are %+v, want one, its message delivered", jobs)
	}
	// The step it took the note before is the first whose request
	// held it.
	at := jobs[0].Messages[0].Step
	if at < 1 || at > len(saw) || saw[at-1] != 1 || at > 1 && saw[at-2] != 0 {
		t.Errorf("the receipt says delivered before step %d; the writer's requests held the note %v times", at, saw)
	}
}

// An entry of a factory's journal too large for its workflow's history (a
// tool result past the worker's payload limit, and past the server's 2 MB
// bound on a signal) is not recorded there, and the run goes on: a write
// the server would refuse does not fail the agent.
func TestFactoryJournalSkipsWhatTheServerWouldRefuse(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const size = 3 << 20
	big := tool.Func{Def: tool.Definition{Name: "fetch", Description: "Fetches.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) {
			return tool.Result{Content: strings.Repeat("x", size)}, nil
		}}
	reader := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		if rs := resultsOf(req); len(rs) > 0 {
			return provider.AssistantMessage(fmt.Sprintf("read %d bytes", len(rs[0]))), nil
		}
		return provider.AssistantMessage("", provider.ToolCall{ID: "f", Name: "fetch", Arguments: json.RawMessage(`{}`)}), nil
	}}
	lead := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		if rs := resultsOf(req); len(rs) > 0 {
			return provider.AssistantMessage("lead: " + rs[0]), nil
		}
		return provider.AssistantMessage("", provider.ToolCall{ID: "s", Name: "reader", Arguments: json.RawMessage(`{"task":"fetch it"}`)}), nil
	}}
	queue := fmt.Sprintf("deputy-factory-big-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": lead}, Factories: map[string]subagent.Factory{
		"reader": func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(reader, agent.WithName("reader"), agent.WithTools(big))
		},
	}})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	spec := Spec{Name: "lead", Provider: "m", SubAgents: []SubAgent{{Name: "reader", Description: "Reads.", Factory: "reader"}}}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "factory-big-" + queue, TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: spec, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.Answer, "lead: read ") {
		t.Errorf("the lead answered %q, want the reader's answer", out.Answer)
	}
}

// The workers' policy binds a factory's job as it binds a factory's
// agent in the foreground: the agent's call of a denied tool does not
// run, and a secret in the job's answer reaches no model of the tree,
// the lead's that collects it included.
func TestPolicyBindsAFactorysJob(t *testing.T) {
	const secret = "hunter2-vault-key"
	var removed atomic.Int64
	rm := tool.Func{Def: tool.Definition{Name: "rm", Description: "Removes.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) {
			removed.Add(1)
			return tool.Result{Content: "removed"}, nil
		}}
	var mu sync.Mutex
	var read []string // every request's text, the lead's and the job's
	note := func(req provider.Request) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range req.Messages {
			read = append(read, m.Content)
		}
	}
	cleaner := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		note(req)
		if rs := resultsOf(req); len(rs) > 0 {
			return provider.AssistantMessage("cleaned up; the key is " + secret), nil
		}
		return provider.AssistantMessage("", provider.ToolCall{ID: "r", Name: "rm", Arguments: json.RawMessage(`{}`)}), nil
	}}
	lead := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		note(req)
		rs := resultsOf(req)
		switch len(rs) {
		case 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: "s", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"clean up","agent":"cleaner","background":true}`)}), nil
		case 1:
			return provider.AssistantMessage("", provider.ToolCall{ID: "w", Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","job_id":"` + jobIDOf(rs[0]) + `","timeout_seconds":300}`)}), nil
		}
		return provider.AssistantMessage("lead: " + rs[1]), nil
	}}
	pol, err := policy.New(policy.DenyTools("no-rm", policy.AnyDepth, "rm"), policy.Redact("secrets", []string{secret}))
	if err != nil {
		t.Fatal(err)
	}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": lead}, Policy: pol, Factories: map[string]subagent.Factory{
		"cleaner": func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(cleaner, agent.WithName("cleaner"), agent.WithTools(rm))
		},
	}})
	spec := Spec{Name: "lead", Provider: "m", Spawn: true, Background: true, Roster: []SubAgent{{Name: "cleaner", Description: "Cleans.", Factory: "cleaner"}}}
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "tidy"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if removed.Load() != 0 {
		t.Errorf("rm ran %d times under a policy that denies it", removed.Load())
	}
	if !strings.Contains(out.Answer, "cleaned up") || strings.Contains(out.Answer, secret) {
		t.Errorf("the lead answered %q, want the job's answer, redacted", out.Answer)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, text := range read {
		if strings.Contains(text, secret) {
			t.Errorf("a model read the secret: %q", text)
		}
	}
	if cc, _ := cleaner.total(); cc != 2 {
		t.Errorf("the job's model was asked %d times, want 2: the denial read, then the answer", cc)
	}
}
