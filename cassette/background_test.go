package cassette_test

import (
	"context"
	"encoding/json"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// untag leaves the jobs' tags and ids out of a request's key.
func untag(req *provider.Request) {
	re := regexp.MustCompile(`\s*\[\d\]|(job|sub|msg)_[0-9a-z]+`)
	msgs := slices.Clone(req.Messages)
	for i := range msgs {
		msgs[i].Content = re.ReplaceAllString(msgs[i].Content, "")
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

// The ways real providers name tool calls: afresh on every request, not
// at all, or from call_0 again in every response.
var idModes = []struct {
	name string
	id   func(answer int64, i int) string
}{
	{"fresh ids", func(n int64, i int) string { return "call_" + strconv.FormatInt(100*n+int64(i), 10) }},
	{"no ids", func(int64, int) string { return "" }},
	{"ids restarting at call_0", func(_ int64, i int) string { return "call_" + strconv.Itoa(i) }},
}

const parallelJobs = 4

var tag = regexp.MustCompile(`\[\d\]`)

// parallelJobsModel returns a lead that starts parallelJobs background
// jobs in one step, tagged [0], [1], …, waits for all of them and
// answers; a job answers with its tag. The lead names its calls with id.
func parallelJobsModel(id func(answer int64, i int) string) provider.Func {
	var answers atomic.Int64
	return func(ctx context.Context, req provider.Request) (provider.Response, error) {
		usage := provider.Usage{InputTokens: 10, OutputTokens: 3, Requests: 1}
		if agent.Name(ctx) != "lead" {
			return provider.Response{Message: provider.AssistantMessage("found it for " + tag.FindString(req.Messages[0].Content)), Usage: usage}, nil
		}
		n := answers.Add(1)
		results := 0
		for _, m := range req.Messages {
			if m.Role == provider.RoleTool {
				results++
			}
		}
		var msg provider.Message
		switch results {
		case 0:
			calls := make([]provider.ToolCall, parallelJobs)
			for i := range calls {
				calls[i] = provider.ToolCall{ID: id(n, i), Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"Look it up. [` + strconv.Itoa(i) + `]","background":true}`)}
			}
			msg = provider.AssistantMessage("", calls...)
		case parallelJobs:
			msg = provider.AssistantMessage("", provider.ToolCall{ID: id(n, 0), Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","mode":"all","timeout_seconds":60}`)})
		default:
			msg = provider.AssistantMessage("All found.")
		}
		return provider.Response{Message: msg, Usage: usage}, nil
	}
}

// anonymous leaves the random job, run and message ids out of a request's
// key, and nothing else.
func anonymous(req *provider.Request) {
	re := regexp.MustCompile(`(job|sub|msg)_[0-9a-z]+`)
	msgs := slices.Clone(req.Messages)
	for i := range msgs {
		msgs[i].Content = re.ReplaceAllString(msgs[i].Content, "ID")
		calls := slices.Clone(msgs[i].ToolCalls)
		for k := range calls {
			calls[k].Arguments = json.RawMessage(re.ReplaceAll(calls[k].Arguments, []byte("ID")))
		}
		msgs[i].ToolCalls = calls
	}
	req.Messages = msgs
}

// startsIn is the spawn tool whose call for the job tagged [k] waits
// order[k] milliseconds before it starts the job, so that the jobs start
// in the order order gives (nil: as they come). The child is offered it,
// as the spawner offers a tool of its registry it does not know as
// itself.
type startsIn struct {
	tool.Tool
	order []int
}

func (s startsIn) Call(ctx context.Context, c tool.Call) (tool.Result, error) {
	if s.order != nil {
		k, _ := strconv.Atoi(strings.Trim(tag.FindString(string(c.Arguments)), "[]"))
		time.Sleep(time.Duration(s.order[k]) * time.Millisecond)
	}
	return s.Tool.Call(ctx, c)
}

// runParallelJobs runs the lead on p, its jobs started in the order order
// gives (nil: as they come), and returns its answer, what it read of the
// wait, and each job's answer by its tag.
func runParallelJobs(t *testing.T, p provider.Provider, order []int) (answer, waited string, jobs map[string]string) {
	t.Helper()
	tools, err := tool.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	spawner, err := subagent.NewSpawner(p, tools, subagent.WithBackground())
	if err != nil {
		t.Fatal(err)
	}
	if err := tools.Register(startsIn{spawner, order}); err != nil {
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
	out, err := lead.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "Find it four times."})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range out.Messages {
		if m.Role == provider.RoleTool && strings.HasPrefix(m.Content, "job ") {
			waited = m.Content
		}
	}
	jobs = map[string]string{}
	for _, n := range tree.Roots() {
		var a struct{ Task string }
		json.Unmarshal(n.Arguments, &a)
		var s string
		json.Unmarshal(n.Result, &s)
		jobs[tag.FindString(a.Task)] = s
	}
	return out.Answer, waited, jobs
}

// A lead that waits for several jobs started in one step reads them in
// the order of the calls that started them, not in the order they
// started, which the parallel calls race for: recorded with the jobs
// starting last to first, its run replays with no miss however they start
// in the replay (first to last, or as they come), at any GOMAXPROCS, with
// every id mode of the lead's calls.
func TestParallelJobsWaitReplaysInAnyStartOrder(t *testing.T) {
	reversed, inOrder := []int{30, 20, 10, 0}, []int{0, 10, 20, 30}
	wantJobs := map[string]string{"[0]": "found it for [0]", "[1]": "found it for [1]", "[2]": "found it for [2]", "[3]": "found it for [3]"}
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			rec := cassette.Record(parallelJobsModel(mode.id), cassette.WithNormalize(anonymous))
			var waited string
			synctest.Test(t, func(t *testing.T) {
				var answer string
				var jobs map[string]string
				answer, waited, jobs = runParallelJobs(t, rec, reversed)
				if answer != "All found." || !mapsEqual(jobs, wantJobs) {
					t.Fatalf("recorded: %q, jobs %v", answer, jobs)
				}
			})
			if n := rec.LiveCalls(); n != 3+parallelJobs {
				t.Fatalf("recorded %d calls, want %d", n, 3+parallelJobs)
			}
			c, err := rec.Cassette()
			if err != nil {
				t.Fatal(err)
			}
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
			for _, procs := range []int{1, 2, 8} {
				runtime.GOMAXPROCS(procs)
				for i := range 6 {
					p := cassette.Replay(c, cassette.WithNormalize(anonymous))
					var answer, got string
					var jobs map[string]string
					if i%2 == 0 {
						synctest.Test(t, func(t *testing.T) { answer, got, jobs = runParallelJobs(t, p, inOrder) })
					} else {
						answer, got, jobs = runParallelJobs(t, p, nil)
					}
					if m := p.Misses(); len(m) > 0 {
						t.Fatalf("GOMAXPROCS %d, replay %d: %d misses, the first: %v", procs, i, len(m), m[0])
					}
					ids := regexp.MustCompile(`job_[0-9a-z]+`)
					if answer != "All found." || !mapsEqual(jobs, wantJobs) || ids.ReplaceAllString(got, "job") != ids.ReplaceAllString(waited, "job") {
						t.Fatalf("GOMAXPROCS %d, replay %d: %q, jobs %v, the wait read\n%s\nrecorded:\n%s", procs, i, answer, jobs, got, waited)
					}
					if p.LiveCalls() != 0 {
						t.Fatalf("GOMAXPROCS %d, replay %d: %d calls reached a model", procs, i, p.LiveCalls())
					}
				}
			}
		})
	}
}
