package subagent

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/conversation"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/postgres"
	"github.com/deputy-go/deputy/store/postgres/pgtest"
)

// longHaul is a resident expert on a fake model with a small window and
// Anthropic's prompt cache, and a summarizer that keeps the facts it is
// shown. It counts what a user of the expert would look at.
type longHaul struct {
	window                int64
	expert                *agent.React
	tool                  *SubAgentTool
	summaries             atomic.Int64
	largest               atomic.Int64 // the largest expert request, in the fake's tokens
	input, cacheRead      atomic.Int64 // the expert's own calls
	lastRequest           atomic.Pointer[provider.Request]
	summarizerSawThePrior atomic.Int64 // summaries made with an earlier summary in view
}

var launchCode = regexp.MustCompile(`launch code is \d+`)

func newLongHaul(t testing.TB, window int64, toolOpts []Option, opts ...agent.Option) *longHaul {
	h := &longHaul{window: window}
	cached := fake.NewProvider(fake.Text("Noted.")).Loop().PromptCache(fake.AnthropicCache).DontRecord()
	expertModel := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		size := fake.Usage(req, provider.Message{}).InputTokens
		for {
			old := h.largest.Load()
			if size <= old || h.largest.CompareAndSwap(old, size) {
				break
			}
		}
		h.lastRequest.Store(&req)
		if q := req.Messages[len(req.Messages)-1].Content; strings.HasPrefix(q, "What is the launch code?") {
			// The model answers from what it was sent: the summary, when
			// the fact was folded into one.
			for _, m := range req.Messages {
				if f := launchCode.FindString(m.Content); f != "" {
					return provider.Response{Message: provider.AssistantMessage("The " + f + ".")}, nil
				}
			}
			return provider.Response{Message: provider.AssistantMessage("I do not know.")}, nil
		}
		resp, err := cached.Complete(ctx, req)
		h.input.Add(resp.Usage.InputTokens)
		h.cacheRead.Add(resp.Usage.CacheReadTokens)
		return resp, err
	})
	summarizer := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		h.summaries.Add(1)
		text := req.Messages[0].Content
		if strings.Contains(text, "earlier turns were compacted") {
			h.summarizerSawThePrior.Add(1)
		}
		facts := map[string]bool{}
		for _, f := range launchCode.FindAllString(text, -1) {
			facts[f] = true
		}
		summary := "Notes were taken on " + strconv.Itoa(strings.Count(text, "User: ")) + " topics."
		for f := range facts {
			summary += " The " + f + "."
		}
		msg := provider.AssistantMessage(summary)
		return provider.Response{Message: msg, Usage: fake.Usage(req, msg)}, nil
	})
	opts = append([]agent.Option{agent.WithName("expert"), agent.WithSystemPrompt("You keep notes for the team."),
		agent.WithContextWindow(window), agent.WithCompaction(agent.Compaction{Summarizer: summarizer})}, opts...)
	h.expert = must(agent.NewReact(expertModel, opts...))(t)
	h.tool = must(FromAgent("expert", "Keeps the team's notes.", h.expert, toolOpts...))(t)
	return h
}

// note is the i-th question of the soak: a few hundred bytes, so that
// compactions come every few dozen calls.
func note(i int) string {
	if i == 0 {
		return "Remember this: the launch code is 7412."
	}
	return fmt.Sprintf("Note %d: the inspection of bay %d found %s.", i, i%17, strings.Repeat("nothing out of order, ", 12))
}

// A resident consulted ten thousand times with an 8k-token window stays
// consultable: no request passes the window, a fact given on the first
// call and long since folded into summaries is still answered, and
// between compactions the prompt cache serves most of every request.
func TestResidentStaysInsideItsWindowForTenThousandCalls(t *testing.T) {
	const calls = 10_000
	h := newLongHaul(t, 8192, nil)
	ctx := context.Background()
	compactions := 0
	for i := range calls {
		res, err := callTool(ctx, h.tool, "c"+strconv.Itoa(i), `{"task":`+strconv.Quote(note(i))+`}`)
		if err != nil || res.IsError {
			t.Fatalf("call %d: %v %q", i, err, res.Content)
		}
	}
	res, err := callTool(ctx, h.tool, "last", `{"task":"What is the launch code?"}`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Content != "The launch code is 7412." {
		t.Errorf("the expert answered %q, want the launch code it was told on the first call", res.Content)
	}
	last := h.lastRequest.Load()
	for _, m := range last.Messages[1:] {
		if strings.Contains(m.Content, "Remember this") {
			t.Fatal("the first call's message is still in the conversation: nothing was compacted")
		}
	}
	if !strings.HasPrefix(last.Messages[0].Content, "[Summary of the conversation so far") {
		t.Errorf("the last request does not start with a summary: %.80q", last.Messages[0].Content)
	}
	if got := h.largest.Load(); got > h.window {
		t.Errorf("the largest request was %d tokens, over the %d-token window", got, h.window)
	}
	if err := conversation.Check(h.expert.History()); err != nil {
		t.Errorf("the conversation is one a model would refuse: %v", err)
	}
	compactions = int(h.summaries.Load())
	if compactions < 20 {
		t.Errorf("%d compactions in %d calls, want one every few dozen calls", compactions, calls)
	}
	if h.summarizerSawThePrior.Load() < int64(compactions-1) {
		t.Errorf("%d of %d summaries were made without the earlier summary in view", int64(compactions)-h.summarizerSawThePrior.Load(), compactions)
	}
	share := float64(h.cacheRead.Load()) / float64(h.input.Load())
	if share < 0.80 {
		t.Errorf("cache-read share %.3f, want at least 0.80", share)
	}
	t.Logf("%d calls: %d compactions, largest request %d tokens (window %d), cache-read share %.3f",
		calls, compactions, h.largest.Load(), h.window, share)
}

// A stored resident stays inside its window across restarts: three
// processes in turn consult it on one store, and the last still knows
// what the first was told, from a summary; the stored record stays small.
func TestStoredResidentCompactsAcrossRestarts(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "deputy.db")
		testStoredLongHaul(t, func() *store.Store { return openStore(t, path) })
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.DSN(t, "deputy_test_subagent_longhaul")
		testStoredLongHaul(t, func() *store.Store {
			be, err := postgres.Open(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			st := must(store.New(be))(t)
			t.Cleanup(func() { st.Close() })
			return st
		})
	})
}

func testStoredLongHaul(t *testing.T, open func() *store.Store) {
	const window, restarts, perProcess = 4096, 3, 600
	ctx := context.Background()
	var largest int64
	compactions := int64(0)
	var h *longHaul
	for p := range restarts {
		st := open()
		h = newLongHaul(t, window, []Option{WithStore(st, "expert")})
		for i := range perProcess {
			n := p*perProcess + i
			res, err := callTool(ctx, h.tool, "c"+strconv.Itoa(n), `{"task":`+strconv.Quote(note(n))+`}`)
			if err != nil || res.IsError {
				t.Fatalf("process %d, call %d: %v %q", p, i, err, res.Content)
			}
		}
		largest = max(largest, h.largest.Load())
		compactions += h.summaries.Load()
		parts, _, _, err := st.ReadParts(ctx, "expert", store.Parts{})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(bytes.Join(parts, nil)); n > 8*window {
			t.Errorf("process %d left a stored conversation of %d bytes, for a window of %d tokens", p, n, window)
		}
		if p < restarts-1 {
			st.Close()
		}
	}
	res, err := callTool(ctx, h.tool, "last", `{"task":"What is the launch code?"}`)
	if err != nil || res.Content != "The launch code is 7412." {
		t.Fatalf("after %d restarts the expert answered %q (%v), want the launch code the first process was told", restarts-1, res.Content, err)
	}
	if largest > window {
		t.Errorf("the largest request was %d tokens, over the %d-token window", largest, window)
	}
	if compactions < restarts*5 {
		t.Errorf("%d compactions in %d calls", compactions, restarts*perProcess)
	}
}
