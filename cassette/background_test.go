package cassette_test

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// jobsModel returns a lead that starts two background jobs with one task,
// told apart by a tag ("[0]", "[1]") the cassette's normalizing leaves
// out, and waits for both; the jobs answer in the order they ask, which
// they cannot tell apart.
func jobsModel() provider.Func {
	var mu sync.Mutex
	answered := 0
	return func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if agent.Name(ctx) == "lead" {
			return jobsLead(req)
		}
		mu.Lock()
		answered++
		n := answered
		mu.Unlock()
		return provider.Response{Message: provider.AssistantMessage("found it, job " + strconv.Itoa(n) + " to ask"), Usage: provider.Usage{InputTokens: 10, OutputTokens: 3, Requests: 1}}, nil
	}
}

func jobsLead(req provider.Request) (provider.Response, error) {
	var results []string
	for _, m := range req.Messages {
		if m.Role == provider.RoleTool {
			results = append(results, m.Content)
		}
	}
	var msg provider.Message
	switch len(results) {
	case 0:
		spawn := func(k string) provider.ToolCall {
			return provider.ToolCall{Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"Look it up. [` + k + `]","background":true}`)}
		}
		msg = provider.AssistantMessage("", spawn("0"), spawn("1"))
	case 2:
		msg = provider.AssistantMessage("", provider.ToolCall{Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","mode":"all","timeout_seconds":60}`)})
	default:
		msg = provider.AssistantMessage("Both found it.")
	}
	return provider.Response{Message: msg, Usage: provider.Usage{InputTokens: 20, OutputTokens: 5, Requests: 1}}, nil
}

// untag leaves the jobs' tags and ids out of a request's key, and the
// order in which the jobs of a wait are listed (the order they started
// in, which the two parallel calls that start them race for).
func untag(req *provider.Request) {
	re := regexp.MustCompile(`\s*\[\d\]|(job|sub|msg)_[0-9a-z]+`)
	msgs := slices.Clone(req.Messages)
	for i := range msgs {
		msgs[i].Content = re.ReplaceAllString(msgs[i].Content, "")
		if msgs[i].Role == provider.RoleTool {
			jobs := strings.Split(msgs[i].Content, "\n\n")
			slices.Sort(jobs)
			msgs[i].Content = strings.Join(jobs, "\n\n")
		}
		calls := slices.Clone(msgs[i].ToolCalls)
		for k := range calls {
			calls[k].Arguments = json.RawMessage(re.ReplaceAll(calls[k].Arguments, nil))
		}
		msgs[i].ToolCalls = calls
	}
	req.Messages = msgs
}

// paced has a call whose request holds first wait a second before it
// reaches p, and one that holds last two seconds after p answers.
func paced(p provider.Provider, first, last string) provider.Provider {
	holds := func(req provider.Request, tag string) bool {
		return tag != "" && slices.ContainsFunc(req.Messages, func(m provider.Message) bool { return strings.Contains(m.Content, tag) })
	}
	return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if holds(req, first) {
			time.Sleep(time.Second)
		}
		resp, err := p.Complete(ctx, req)
		if holds(req, last) {
			time.Sleep(2 * time.Second)
		}
		return resp, err
	})
}

// runJobs runs the lead on p and returns each job's answer by its task.
func runJobs(t *testing.T, p provider.Provider) map[string]string {
	t.Helper()
	tools, err := tool.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	spawner, err := subagent.NewSpawner(p, tools, subagent.WithBackground())
	if err != nil {
		t.Fatal(err)
	}
	if err := tools.Register(spawner); err != nil {
		t.Fatal(err)
	}
	if err := tools.Register(spawner.JobsTool()); err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithRegistry(tools))
	if err != nil {
		t.Fatal(err)
	}
	tree := subagent.NewTree(nil)
	if _, err := lead.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "Find it twice."}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range tree.Roots() {
		var a struct{ Task string }
		json.Unmarshal(n.Arguments, &a)
		var answer string
		json.Unmarshal(n.Result, &answer)
		got[a.Task] = answer
	}
	return got
}

// Background jobs are keyed by the place of the call that started them,
// as children in the foreground are: two jobs whose requests are the same
// (once normalized) replay each its own answer, even when they ask in the
// other order than when they were recorded.
func TestBackgroundJobsReplayByTheirPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		want := map[string]string{"Look it up. [0]": "found it, job 2 to ask", "Look it up. [1]": "found it, job 1 to ask"}
		rec := cassette.Record(jobsModel(), cassette.WithNormalize(untag))
		// Recorded with the second job asking first, and ending first.
		if got := runJobs(t, paced(rec, "[0]", "")); !mapsEqual(got, want) {
			t.Fatalf("recorded: %v", got)
		}
		c, err := rec.Cassette()
		if err != nil {
			t.Fatal(err)
		}
		var places []string
		for _, e := range c.Entries() {
			if strings.Contains(e.Position, "/") {
				places = append(places, e.Position)
			}
		}
		if want := []string{"lead/subagent@1.0", "lead/subagent@1.1"}; !slices.Equal(places, want) {
			t.Errorf("the jobs' calls are at %v, want %v", places, want)
		}
		// Replayed with the first job asking first, and ending last, so
		// that the lead collects them in the order it did.
		p := cassette.Replay(c, cassette.WithNormalize(untag))
		if got := runJobs(t, paced(p, "[1]", "[0]")); !mapsEqual(got, want) {
			t.Errorf("replayed: %v, want %v", got, want)
		}
		if m := p.Misses(); len(m) > 0 {
			t.Errorf("%d misses, the first: %v", len(m), m[0])
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
