package subagent_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

const (
	soakChildren = 8
	soakMessages = 3 // per child
)

var soakText = regexp.MustCompile(`from the agent that started you:\n(c\d+-m\d+)`)

// soakWorld is what the soak's runs share, as a process's store and the
// world outside it would: the side effects and what the model billed.
type soakWorld struct {
	mu       sync.Mutex
	recorded map[string][]string // by child: the messages its record tool wrote, in order
	billed   map[string]int      // by request fingerprint
	total    provider.Usage
}

// TestBackgroundSoak: a lead starts 8 background children and sends them
// 24 messages in random order (at most one per child in a step), then
// waits for them all; each child writes every message it receives with a
// side-effect tool, then answers with them. The turn is crashed three
// times at random model calls and run again from its journal each time.
// Every child answers exactly once with its messages in the order sent,
// every side effect ran once, no model answer was paid for twice, and
// what the turn reports spent is what the model billed.
func TestBackgroundSoak(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			seed := rand.Uint64()
			r := rand.New(rand.NewPCG(seed, 7))
			plan := soakPlan(r)
			st := newStore(t)
			w := &soakWorld{recorded: map[string][]string{}, billed: map[string]int{}}
			crashes := 0
			var out agent.Output
			for round := 0; ; round++ {
				if round > 10 {
					t.Fatalf("seed %d: no end after %d rounds", seed, round)
				}
				crashAt := int64(0)
				if crashes < 3 {
					crashAt = 1 + r.Int64N(40)
				}
				o, crashed, err := soakRound(t, st, w, plan, mode.id, crashAt)
				if crashed {
					crashes++
					continue
				}
				if err != nil {
					t.Fatalf("seed %d, round %d: %v", seed, round, err)
				}
				out = o
				break
			}
			if out.Answer != "all done" {
				t.Errorf("seed %d: answer %q", seed, out.Answer)
			}
			for c := range soakChildren {
				var want []string
				for k := range soakMessages {
					want = append(want, fmt.Sprintf("c%d-m%d", c, k))
				}
				if got := w.recorded[fmt.Sprint("c", c)]; !slices.Equal(got, want) {
					t.Errorf("seed %d: child %d recorded %v, want %v, each once, in order", seed, c, got, want)
				}
			}
			for fp, n := range w.billed {
				if n > 1 {
					t.Errorf("seed %d: a model answer was paid for %d times (%s)", seed, n, fp)
				}
			}
			if got := out.TotalUsage(); got != w.total {
				t.Errorf("seed %d: the turn reports %+v spent, the model billed %+v", seed, got, w.total)
			}
			t.Logf("seed %d: %d crashes, %d model calls billed", seed, crashes, w.total.Requests)
		})
	}
}

// soakPlan is the order of the 24 sends, in steps of at most one message
// per child, each child's messages in order.
func soakPlan(r *rand.Rand) [][]string {
	var all []int // a child per message, shuffled
	for c := range soakChildren {
		for range soakMessages {
			all = append(all, c)
		}
	}
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	next := make([]int, soakChildren)
	var steps [][]string
	for len(all) > 0 {
		var step []string
		used := map[int]bool{}
		rest := all[:0:0]
		for _, c := range all {
			if used[c] || len(step) == 4 {
				rest = append(rest, c)
				continue
			}
			used[c] = true
			step = append(step, fmt.Sprintf("c%d-m%d", c, next[c]))
			next[c]++
		}
		all = rest
		steps = append(steps, step)
	}
	return steps
}

// soakRound runs the turn once; crashAt is the model call at which the
// process dies (0: none).
func soakRound(t *testing.T, st *store.Store, w *soakWorld, plan [][]string, idOf func(int64, int) string, crashAt int64) (agent.Output, bool, error) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var calls, answers atomic.Int64
	var crashed atomic.Bool
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if calls.Add(1) == crashAt {
			crashed.Store(true)
			cancel()
			return provider.Response{}, ctx.Err()
		}
		if err := ctx.Err(); err != nil {
			return provider.Response{}, err
		}
		n := answers.Add(1)
		var msg provider.Message
		if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
			msg = soakChild(req, n, idOf)
		} else {
			msg = soakLead(req, plan, n, idOf)
		}
		u := provider.Usage{InputTokens: int64(len(req.Messages)), OutputTokens: 1, Requests: 1}
		sum := sha256.New()
		b, _ := json.Marshal(req.Messages)
		sum.Write([]byte(req.System))
		sum.Write(b)
		w.mu.Lock()
		w.billed[hex.EncodeToString(sum.Sum(nil))[:16]]++
		w.total = w.total.Add(u)
		w.mu.Unlock()
		return provider.Response{Message: msg, Usage: u}, nil
	})
	record := tool.Func{Def: tool.Definition{Name: "record", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(_ context.Context, c tool.Call) (tool.Result, error) {
			var a struct{ Text string }
			if err := json.Unmarshal(c.Arguments, &a); err != nil {
				return tool.Result{}, err
			}
			child := a.Text[:strings.Index(a.Text, "-")]
			w.mu.Lock()
			w.recorded[child] = append(w.recorded[child], a.Text)
			w.mu.Unlock()
			return tool.Result{Content: "recorded " + a.Text}, nil
		}}
	nap := tool.Func{Def: tool.Definition{Name: "nap", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			select {
			case <-time.After(2 * time.Millisecond):
			case <-ctx.Done():
				return tool.Result{}, ctx.Err()
			}
			return tool.Result{Content: "rested"}, nil
		}}
	reg, err := tool.NewRegistry(record, nap)
	if err != nil {
		t.Fatal(err)
	}
	s, err := subagent.NewSpawner(model, reg, subagent.WithBackground(), subagent.WithMaxBackground(soakChildren), subagent.WithChildMaxSteps(400))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(s.JobsTool()); err != nil {
		t.Fatal(err)
	}
	j, err := st.Journal(ctx, "soak")
	if err != nil {
		t.Fatal(err)
	}
	out, err := lead(t, model, reg, agent.WithMaxSteps(100)).Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
	return out, crashed.Load(), err
}

// soakLead starts the children, sends the plan's messages a step at a
// time, waits for every child, and answers.
func soakLead(req provider.Request, plan [][]string, n int64, idOf func(int64, int) string) provider.Message {
	var jobs []string
	sent, done := 0, 0
	for _, m := range req.Messages {
		if m.Role != provider.RoleTool {
			continue
		}
		var v map[string]any
		switch {
		case json.Unmarshal([]byte(m.Content), &v) == nil && v["message_id"] != nil:
			sent++
		case v["job_id"] != nil && v["status"] == "running":
			jobs = append(jobs, v["job_id"].(string))
		default:
			done += strings.Count(m.Content, ") done:")
		}
	}
	var calls []provider.ToolCall
	add := func(name, args string) {
		calls = append(calls, provider.ToolCall{ID: idOf(n, len(calls)), Name: name, Arguments: json.RawMessage(args)})
	}
	switch {
	case len(jobs) == 0:
		for c := range soakChildren {
			add(subagent.SpawnToolName, fmt.Sprintf(`{"task":"child c%d","background":true}`, c))
		}
	case sent < soakChildren*soakMessages:
		k := 0
		for _, step := range plan {
			if k == sent {
				for _, text := range step {
					var c int
					fmt.Sscanf(text, "c%d-", &c)
					add(subagent.JobsToolName, fmt.Sprintf(`{"action":"send","job_id":%q,"message":%q}`, jobs[c], text))
				}
				break
			}
			k += len(step)
		}
	case done < soakChildren:
		add(subagent.JobsToolName, `{"action":"wait","timeout_seconds":600}`)
	default:
		return provider.AssistantMessage("all done")
	}
	return provider.AssistantMessage("", calls...)
}

// soakChild records each message it received, one a step, in order,
// naps while it waits for more, and answers with them all.
func soakChild(req provider.Request, n int64, idOf func(int64, int) string) provider.Message {
	var got, recorded []string
	for _, m := range req.Messages {
		switch m.Role {
		case provider.RoleUser:
			for _, sm := range soakText.FindAllStringSubmatch(m.Content, -1) {
				got = append(got, sm[1])
			}
		case provider.RoleTool:
			if text, ok := strings.CutPrefix(m.Content, "recorded "); ok {
				recorded = append(recorded, text)
			}
		}
	}
	call := func(name, args string) provider.Message {
		return provider.AssistantMessage("", provider.ToolCall{ID: idOf(n, 0), Name: name, Arguments: json.RawMessage(args)})
	}
	switch {
	case len(recorded) < len(got):
		return call("record", fmt.Sprintf(`{"text":%q}`, got[len(recorded)]))
	case len(recorded) < soakMessages:
		return call("nap", `{}`)
	}
	return provider.AssistantMessage(strings.Join(recorded, ","))
}
