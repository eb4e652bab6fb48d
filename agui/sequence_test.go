package agui_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// expertAndTwoChildren builds, per request, a lead that consults a
// resident expert (FromAgent), then two researchers at once (FromFactory),
// then answers.
func expertAndTwoChildren(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
	p := fake.NewProvider(
		fake.Call("expert", `{"task":"What matters here?"}`).Saying("Let me ask the expert first.").For("lead"),
		fake.Calls(
			provider.ToolCall{Name: "researcher", Arguments: json.RawMessage(`{"task":"topic A"}`)},
			provider.ToolCall{Name: "researcher", Arguments: json.RawMessage(`{"task":"topic B"}`)},
		).Saying("Now two researchers.").For("lead"),
		fake.Text("Scope, sources, A and B are covered.").For("lead"),
		fake.Text("Scope and sources.").For("expert"),
	)
	for range 2 {
		p.Add(fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			// The child is handed its task's text.
			return provider.Response{Message: provider.AssistantMessage("Findings on " + req.Messages[0].Content + ".")}, nil
		}).For("researcher"))
	}
	resident, err := agent.NewReact(p, agent.WithName("expert"))
	if err != nil {
		return nil, err
	}
	expert, err := subagent.FromAgent("expert", "Knows the field.", resident)
	if err != nil {
		return nil, err
	}
	researcher, err := subagent.FromFactory("researcher", "Researches one topic.",
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, agent.WithName("researcher"))
		})
	if err != nil {
		return nil, err
	}
	return agent.NewReact(p, agent.WithName("lead"), agent.WithTools(expert, researcher))
}

var randomID = regexp.MustCompile(`\b(run|sub)_[0-9a-z]+|\bcall_[0-9a-z]+_[0-9]+`)
var timestamp = regexp.MustCompile(`"timestamp":[0-9]+,`)

// normalize replaces the random run and sub-agent ids with numbered ones,
// in order of first appearance, and drops the timestamps.
func normalize(lines []string) []string {
	seen := map[string]string{}
	count := map[string]int{}
	out := make([]string, len(lines))
	for i, l := range lines {
		l = timestamp.ReplaceAllString(l, "")
		out[i] = randomID.ReplaceAllStringFunc(l, func(id string) string {
			if n, ok := seen[id]; ok {
				return n
			}
			kind := id[:strings.IndexByte(id, '_')]
			count[kind]++
			seen[id] = kind + "#" + strconv.Itoa(count[kind])
			return seen[id]
		})
	}
	return out
}

// canonical puts a stream in a deterministic order: the events of the
// children that ran in parallel (the span from the first SUBAGENT_STARTED
// of a parallel child to the last SUBAGENT_FINISHED of one) are grouped by
// child, in the order of their tool calls. It checks that the span holds
// nothing but those children's events, each child's starting with its
// SUBAGENT_STARTED and ending with its SUBAGENT_FINISHED.
func canonical(t *testing.T, frames []frame, parallel string) []string {
	t.Helper()
	first, last := -1, -1
	for i, f := range frames {
		if f.e.Type == event.SubagentStarted && f.e.Name == parallel && first < 0 {
			first = i
		}
		if f.e.Type == event.SubagentFinished {
			last = i
		}
	}
	if first < 0 || last < first {
		t.Fatalf("no parallel children named %q", parallel)
	}
	groups := map[string][]string{}
	order := map[string]string{} // child -> its parent tool call
	for _, f := range frames[first : last+1] {
		id := f.e.SubagentRunID
		if id == "" {
			t.Fatalf("an event of the lead among the parallel children: %s", f.raw)
		}
		if f.e.Type == event.SubagentStarted {
			if f.e.Name != parallel || len(groups[id]) != 0 {
				t.Fatalf("unexpected %s", f.raw)
			}
			order[id] = f.e.ParentToolCallID
		} else if len(groups[id]) == 0 {
			t.Fatalf("a child's event before its SUBAGENT_STARTED: %s", f.raw)
		}
		groups[id] = append(groups[id], f.raw)
	}
	ids := make([]string, 0, len(groups))
	for id, g := range groups {
		if !strings.Contains(g[len(g)-1], `"type":"SUBAGENT_FINISHED"`) {
			t.Fatalf("child %s does not end with SUBAGENT_FINISHED: %s", id, g[len(g)-1])
		}
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return order[ids[i]] < order[ids[j]] })
	var out []string
	for _, f := range frames[:first] {
		out = append(out, f.raw)
	}
	for _, id := range ids {
		out = append(out, groups[id]...)
	}
	for _, f := range frames[last+1:] {
		out = append(out, f.raw)
	}
	return out
}

// The exact stream of a lead with a resident expert and two parallel
// children, up to the interleaving of the children, which is checked by
// the ordering rules instead.
func TestGoldenSequence(t *testing.T) {
	h := must(t)(agui.NewPerRequest(expertAndTwoChildren))
	srv := serve(t, h)
	golden := filepath.Join("testdata", "expert-and-two-children.golden")
	for run := range 5 { // the children interleave differently each time
		for _, hide := range []bool{false, true} {
			var headers []string
			if hide {
				headers = []string{agui.SubagentEventsHeader, "hide"}
			}
			resp := post(t, srv.URL, `{"threadId":"thread-1","runId":"run-1","messages":[{"id":"u1","role":"user","content":"Research A and B."}]}`, headers...)
			frames := readFrames(t, resp.Body)
			resp.Body.Close()
			if problems := eventcheck.Check(events(frames), eventcheck.Options{HiddenLifecycle: hide}); len(problems) > 0 {
				t.Fatalf("run %d: the stream breaks the rules:\n%s", run, strings.Join(problems, "\n"))
			}
			var prev int64
			for _, f := range frames {
				if f.e.Timestamp < prev {
					t.Fatalf("timestamps go back: %s", f.raw)
				}
				prev = f.e.Timestamp
			}
			if hide {
				continue // checked against the full stream below
			}
			got := normalize(canonical(t, frames, "researcher"))
			if *update && run == 0 {
				if err := os.WriteFile(golden, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if g := strings.Join(got, "\n") + "\n"; g != string(want) {
				t.Errorf("run %d: the stream differs from %s:\n%s", run, golden, diffLines(string(want), g))
			}
		}
	}
}

// diffLines shows the first differing line of two texts.
func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\nwant " + wl + "\n got " + gl
		}
	}
	return "(same)"
}
