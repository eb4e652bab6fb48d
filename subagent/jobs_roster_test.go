package subagent_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// rosterForms builds a roster with one member of each form a roster
// takes, over p: an agent (FromAgent), one built per call (FromFactory)
// and one the caller defines (FromReact). Each answers as its model does.
func rosterForms(t *testing.T, p provider.Provider) []*subagent.SubAgentTool {
	t.Helper()
	tools, err := tool.NewRegistry(lookup())
	if err != nil {
		t.Fatal(err)
	}
	expert, err := agent.NewReact(p, agent.WithName("expert"), agent.WithRegistry(tools))
	if err != nil {
		t.Fatal(err)
	}
	fromAgent, err := subagent.FromAgent("expert", "Knows the house.", expert)
	if err != nil {
		t.Fatal(err)
	}
	fromFactory, err := subagent.FromFactory("builder", "Builds things.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(p, agent.WithName("builder"), agent.WithRegistry(tools))
	})
	if err != nil {
		t.Fatal(err)
	}
	fromReact, err := subagent.FromReact("reader", "Reads what it is told to.", p, tools)
	if err != nil {
		t.Fatal(err)
	}
	return []*subagent.SubAgentTool{fromAgent, fromFactory, fromReact}
}

// Every form of roster member starts in the background, from the model
// (spawn_subagent with agent and background) and from Go (Jobs.Start),
// is steered by a message at its next step, and is collected by wait:
// each job runs its own member, once, answers with what its model said,
// and is counted once in the lead's ChildUsage — whatever ids the models
// give their calls.
func TestEveryFormOfRosterMemberStartsInTheBackground(t *testing.T) {
	for _, ids := range callIDModes {
		t.Run(ids.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				call := func(n int64, i int, name, args string) provider.ToolCall {
					return provider.ToolCall{ID: ids.id(n, i), Name: name, Arguments: json.RawMessage(args)}
				}
				p := fake.NewProvider(
					// The lead starts the three members at once, tells the
					// reader one more thing, and waits for them all.
					fake.Calls(call(1, 0, subagent.SpawnToolName, `{"task":"where is the key?","agent":"expert","background":true}`),
						call(1, 1, subagent.SpawnToolName, `{"task":"build a shelf","agent":"builder","background":true}`),
						call(1, 2, subagent.SpawnToolName, `{"task":"read the note","agent":"reader","background":true}`)).For("lead"),
					fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
						// The receipts are in call order: the reader's is the third.
						var reader struct {
							ID string `json:"job_id"`
						}
						if rs := toolResults(req.Messages); len(rs) == 3 {
							_ = json.Unmarshal([]byte(rs[2]), &reader)
						}
						return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: ids.id(2, 0), Name: subagent.JobsToolName,
							Arguments: json.RawMessage(`{"action":"send","job_id":"` + reader.ID + `","message":"the note is in the drawer"}`)}), Usage: usage(1)}, nil
					}).For("lead").After(time.Second),
					fake.Calls(call(3, 0, subagent.JobsToolName, `{"action":"wait","timeout_seconds":600}`)).For("lead"),
					fake.Text("all done").For("lead"),
					fake.Text("under the mat").For("expert").WithUsage(usage(3)),
					fake.Text("shelf built").For("builder").WithUsage(usage(5)),
					fake.Calls(call(4, 0, "lookup", `{}`)).For("reader").WithUsage(usage(7)).After(time.Minute),
					fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
						return provider.Response{Message: provider.AssistantMessage("read: " + strings.Join(inbound(req), "|")), Usage: usage(11)}, nil
					}).For("reader"),
				)
				reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground(), subagent.WithRoster(rosterForms(t, p)...)})
				rec := &recorder{}
				out, err := lead(t, p, reg).Run(event.WithSink(t.Context(), rec), agent.Input{Text: "go"})
				if err != nil {
					t.Fatal(err)
				}
				got := toolResults(out.Messages)
				if len(got) != 5 {
					t.Fatalf("tool results %q, want three receipts, a message's and the wait's", got)
				}
				var sent subagent.Receipt
				if err := json.Unmarshal([]byte(got[3]), &sent); err != nil || sent.State != subagent.MessageQueued {
					t.Errorf("the message's receipt %s (%v), want it queued", got[3], err)
				}
				wait := got[4]
				for _, want := range []string{"(expert) done:\nunder the mat", "(builder) done:\nshelf built", "(reader) done:\nread: ", "the note is in the drawer"} {
					if !strings.Contains(wait, want) {
						t.Errorf("wait returned %q, without %q", wait, want)
					}
				}
				for name, want := range map[string]int{"expert": 1, "builder": 1, "reader": 2} {
					if n := len(p.RequestsFor(name)); n != want {
						t.Errorf("%s made %d model calls, want %d", name, n, want)
					}
				}
				if want := (provider.Usage{InputTokens: 3 + 5 + 7 + 11, Requests: 4}); out.ChildUsage != want {
					t.Errorf("ChildUsage %+v, want %+v: each member's calls once", out.ChildUsage, want)
				}
				var started []string
				for _, e := range rec.of(event.SubagentStarted) {
					started = append(started, e.Name)
				}
				slices.Sort(started)
				if want := []string{"builder", "expert", "reader"}; !slices.Equal(started, want) {
					t.Errorf("SUBAGENT_STARTED for %v, want %v", started, want)
				}
			})
		})
	}
}

// Jobs.Start starts a roster member of each form from Go, and Wait
// collects them with their answers.
func TestJobsStartARosterMemberFromGo(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(
			fake.Text("under the mat").For("expert").WithUsage(usage(3)),
			fake.Text("shelf built").For("builder").WithUsage(usage(5)),
			fake.Text("read").For("reader").WithUsage(usage(7)),
		)
		var s *subagent.Spawner
		var results []subagent.JobResult
		var starts []subagent.JobStatus
		driver := tool.Func{Def: tool.Definition{Name: "drive", Parameters: json.RawMessage(`{"type":"object"}`)},
			Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
				jobs := s.Jobs(ctx)
				for _, member := range []string{"expert", "builder", "reader"} {
					st, err := jobs.Start(ctx, subagent.Task{Task: "do your part", Agent: member})
					if err != nil {
						return tool.Result{}, err
					}
					starts = append(starts, st)
				}
				var err error
				results, err = jobs.Wait(ctx, subagent.WaitFor{Timeout: time.Minute})
				var u provider.Usage
				for _, r := range results {
					u = u.Add(r.Result.Usage)
				}
				return tool.Result{Content: "driven", Usage: u}, err
			}}
		p.Add(fake.Call("drive", `{}`).For("lead"), fake.Text("done").For("lead"))
		reg, sp := setup(t, p, false, []subagent.SpawnOption{subagent.WithBackground(), subagent.WithRoster(rosterForms(t, p)...)}, driver)
		s = sp
		out, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		answers := map[string]string{}
		for _, r := range results {
			answers[r.Agent] = r.Result.Content
		}
		want := map[string]string{"expert": "under the mat", "builder": "shelf built", "reader": "read"}
		if len(starts) != 3 || len(results) != 3 || !mapsEqual(answers, want) {
			t.Errorf("started %+v; collected %v, want %v", starts, answers, want)
		}
		if want := (provider.Usage{InputTokens: 15, Requests: 3}); out.ChildUsage != want {
			t.Errorf("ChildUsage %+v, want %+v", out.ChildUsage, want)
		}
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
