package resumetest

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// Model is the model every agent of a schedule calls, as its replies
// name it.
const Model = "tree-model"

// Prices prices Model at powers of two of a dollar a token, so that any
// sum of what calls cost is exact in a float64, whatever its order: the
// ledger's equations in money hold to the last bit.
var Prices = func() *provider.Prices {
	p, err := provider.NewPrices(map[string]provider.Price{Model: {Input: 1.0 / (1 << 20), Output: 4.0 / (1 << 20)}})
	if err != nil {
		panic(err)
	}
	return p
}()

// NewTreeSchedule draws a schedule of the whole tree from r: a schedule of
// NewSchedule, whose children may also validate their answers (and are
// run again to correct the first), whose deepest child may be a resident
// expert asked twice, which compacts its conversation (forced by its
// model's "too long" refusal, or due by its bounds), whose lead may run
// under a token limit, a cost limit or both, whose model calls may pass
// an admission control that meets 429s, and whose turn may be followed
// by a re-run of one child.
func NewTreeSchedule(r *rand.Rand, background bool) Schedule {
	s := NewSchedule(r, background)
	s.tree = true
	s.Validated = make([]bool, s.Levels)
	for l := 1; l < s.Levels; l++ {
		s.Validated[l] = r.IntN(2) == 0
	}
	if s.Levels >= 2 && r.IntN(3) == 0 {
		// The deepest level, so that nothing below it is asked twice;
		// its tools run once for each of the two calls, and ask no one.
		s.Resident = s.Levels - 1
		s.Validated[s.Resident] = false
		s.Compact = CompactForced + r.IntN(2)
		for k, name := range s.Tools[s.Resident] {
			s.Tools[s.Resident][k] = "p" + name[1:]
		}
	}
	if r.IntN(3) == 0 {
		s.TokenLimit = 200 + r.Int64N(3000)
	}
	if r.IntN(3) == 0 {
		s.CostLimit = float64(200+r.IntN(3000)) / (1 << 20)
	}
	s.RateLimited = r.IntN(3) == 0
	s.Rerun = r.IntN(2) == 0
	return s
}

// WholeTree returns s as NewTreeSchedule would draw it with nothing else
// drawn: its models count tokens by the bytes of what they read and
// write, and are priced at Prices.
func (s Schedule) WholeTree() Schedule {
	s.tree = true
	return s
}

// Tree reports whether s was drawn by NewTreeSchedule.
func (s Schedule) Tree() bool { return s.tree }

// Runs reports how many times each call to a tool of level runs in a
// turn that ends with an answer: twice for the resident's, whose parent
// asks it twice; once otherwise.
func (s Schedule) Runs(level int) int {
	if level == s.Resident && s.Resident > 0 {
		return 2
	}
	return 1
}

// A Bill is what the schedule's models billed: the usage of the answers
// they gave, in tokens and in money at Prices.
type Bill struct {
	Usage provider.Usage
	Cost  float64
	// MaxCall is the most tokens (input and output) one call billed.
	MaxCall int64
}

// Sub returns what b billed more than before.
func (b Bill) Sub(before Bill) Bill {
	u, v := b.Usage, before.Usage
	return Bill{Usage: provider.Usage{InputTokens: u.InputTokens - v.InputTokens, OutputTokens: u.OutputTokens - v.OutputTokens,
		CacheReadTokens: u.CacheReadTokens - v.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens - v.CacheWriteTokens, Requests: u.Requests - v.Requests},
		Cost: b.Cost - before.Cost, MaxCall: b.MaxCall}
}

func (b Bill) String() string {
	return fmt.Sprintf("%d in, %d out, %d requests, $%v", b.Usage.InputTokens, b.Usage.OutputTokens, b.Usage.Requests, b.Cost)
}

// billing is what the models billed, and for which requests.
type billing struct {
	mu   sync.Mutex
	bill Bill
	// summaries and corrections count the answers that were a
	// compaction's summary, and a validated child's corrected answer.
	summaries, corrections int
	paid                   map[string]int  // request fingerprint → answers billed
	levels                 map[int]Bill    // level → what its agents' models billed
	refused                map[string]bool // why and request fingerprint → refused once
}

// Billed returns what the schedule's models billed so far, over all runs.
func (w *World) Billed() Bill {
	w.billing.mu.Lock()
	defer w.billing.mu.Unlock()
	return w.billing.bill
}

// BilledAt returns what the models of the agents at level billed so far,
// over all runs: the lead's at 0, each sub-agent's at its depth, the
// background job's child's at Levels. Its MaxCall is not set.
func (w *World) BilledAt(level int) Bill {
	w.billing.mu.Lock()
	defer w.billing.mu.Unlock()
	return w.billing.levels[level]
}

// PaidTwice names the requests the models answered, and billed, more than
// once: a model answer a journal holds that was asked for again.
func (w *World) PaidTwice() []string {
	w.billing.mu.Lock()
	defer w.billing.mu.Unlock()
	var twice []string
	for fp, n := range w.billing.paid {
		if n > 1 {
			twice = append(twice, fmt.Sprintf("%d times: %s", n, fp))
		}
	}
	slices.Sort(twice)
	return twice
}

// bill counts one answer of the model of level to the request of
// fingerprint fp.
func (w *World) bill(level int, fp string, u provider.Usage) {
	w.answers.Add(1)
	if w.Log != nil {
		w.Log(fmt.Sprintf("answer %d %d %d %x/%s", u.InputTokens, u.OutputTokens, u.Requests, fnv64(fp), strings.ReplaceAll(fp[:min(len(fp), 24)], " ", "_")))
	}
	b := &w.billing
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bill.Usage = b.bill.Usage.Add(u)
	cost, _ := Prices.Cost(provider.ModelUsage{Model: Model, Usage: u})
	b.bill.Cost += cost
	b.bill.MaxCall = max(b.bill.MaxCall, u.Tokens())
	at := b.levels[level]
	at.Usage = at.Usage.Add(u)
	at.Cost += cost
	b.levels[level] = at
	b.paid[fp]++
	switch {
	case strings.HasPrefix(fp, SummaryRequest):
		b.summaries++
	case strings.Contains(fp, "Your answer was rejected"):
		b.corrections++
	}
}

// Summaries and Corrections count the answers the models gave that were
// a compaction's summary, and a validated child's corrected answer.
func (w *World) Summaries() int {
	w.billing.mu.Lock()
	defer w.billing.mu.Unlock()
	return w.billing.summaries
}

// Corrections: see Summaries.
func (w *World) Corrections() int {
	w.billing.mu.Lock()
	defer w.billing.mu.Unlock()
	return w.billing.corrections
}

// refuse returns the failure the model answers req with first, if any: a
// 429 with a Retry-After for a third of the requests of a RateLimited
// schedule, once each; a "too long" refusal for the resident's request
// that carries its earlier conversation uncompacted, under CompactForced.
func (w *World) refuse(level int, fp string, req provider.Request) error {
	b := &w.billing
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.S.RateLimited && fnv64(fp)%3 == 0 && !b.refused["429 "+fp] {
		b.refused["429 "+fp] = true
		return &provider.Error{Provider: "tree", StatusCode: 429, Kind: provider.KindRateLimit, Message: "slow down",
			// As real providers do, it says the limit it enforces.
			RateLimit: provider.RateLimit{Requests: 60_000, RequestsRemaining: 0, RequestsReset: time.Millisecond, RetryAfter: time.Millisecond}}
	}
	if level == w.S.Resident && w.S.Compact == CompactForced && uncompacted(req) {
		return &provider.Error{Provider: "tree", StatusCode: 400, Kind: provider.KindContextWindow, Message: "prompt is too long"}
	}
	return nil
}

// uncompacted reports whether req carries an earlier turn of its
// conversation, not folded into a summary.
func uncompacted(req provider.Request) bool {
	users := 0
	for i, m := range req.Messages {
		switch {
		case m.Role != provider.RoleUser, strings.HasPrefix(m.Content, "Budget note:"):
		case i == 0 && strings.HasPrefix(m.Content, "[Summary of the conversation so far"):
			return false
		default:
			users++
		}
	}
	return users > 1
}

// fingerprint names a request by what it asks of the model at level:
// its system prompt and conversation, tool call ids and budget notes left
// out (a model asked again may name its calls afresh; a note changes
// with what was spent). Two answers to one fingerprint are one answer
// paid twice. A request that offers no tools is a wrap-up, and says so:
// a run that could not pay to read the results of the calls it asked
// for reads its conversation without them, and is asked again, to wrap
// up, what it was asked with tools.
func fingerprint(level int, req provider.Request) string {
	var b strings.Builder
	if req.System == agent.DefaultSummaryPrompt {
		fmt.Fprintf(&b, "%s of level %d", SummaryRequest, level)
	} else {
		fmt.Fprintf(&b, "level %d %q", level, req.System)
	}
	for _, m := range req.Messages {
		if m.Role == provider.RoleUser && strings.HasPrefix(m.Content, "Budget note:") {
			continue
		}
		fmt.Fprintf(&b, " | %s %q", m.Role, m.Content)
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, " %s%s", c.Name, c.Arguments)
		}
	}
	if len(req.Tools) == 0 {
		b.WriteString(" | no tools")
	}
	return b.String()
}

// SummaryRequest starts the fingerprint of a request for a compaction's
// summary (PaidTwice).
const SummaryRequest = "the summary"

func fnv64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// requestBytes is what req weighs, as the agents estimate it.
func requestBytes(req provider.Request) int64 {
	n := len(req.System)
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	for _, m := range req.Messages {
		n += replyBytes(m) + len(m.ToolCallID)
	}
	return int64(n)
}

// replyBytes is what a message weighs.
func replyBytes(m provider.Message) int {
	n := len(m.Content)
	for _, c := range m.ToolCalls {
		n += len(c.ID) + len(c.Name) + len(c.Arguments)
	}
	return n
}

// RerunLevel returns the level of the child a Rerun schedule re-runs
// once its turn has ended, or 0 for none: the highest that is not a
// resident (Rerun refuses one) and whose subtree asks no one (a re-run is
// not journaled: a question would stop it).
func (s Schedule) RerunLevel() int {
	if !s.Rerun {
		return 0
	}
	for l := 1; l < s.Levels; l++ {
		asks := false
		for _, names := range s.Tools[l:s.Levels] {
			asks = asks || slices.ContainsFunc(names, func(n string) bool { return n[0] == 'g' })
		}
		if l != s.Resident && !asks {
			return l
		}
	}
	return 0
}

// Rerun re-runs from its start, with fresh agents, the invocation of the
// child at level (RerunLevel) its parent made, and returns the child's
// result.
func (w *World) Rerun(ctx context.Context, level int) (tool.Result, error) {
	t, err := w.child(level)
	if err != nil {
		return tool.Result{}, err
	}
	return t.Rerun(ctx, tool.Call{ID: "rerun", Name: t.Definition().Name, Arguments: json.RawMessage(`{"task":"go on"}`)}, nil)
}

// Level reports the level of the tool named name ("g1_0", "p2_1").
func Level(name string) int {
	l, _ := strconv.Atoi(strings.SplitN(name[1:], "_", 2)[0])
	return l
}

// A Log is what the world told its Log, read back: executions by tool,
// what the models billed, and the requests answered more than once.
type Log struct {
	Ran       map[string]int
	Billed    Bill
	PaidTwice []string
}

// ReadLog reads the lines a world wrote to its Log, in any number of
// processes.
func ReadLog(data []byte) (Log, error) {
	l := Log{Ran: map[string]int{}}
	paid := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if name, ok := strings.CutPrefix(line, "ran "); ok {
			l.Ran[name]++
			continue
		}
		var u provider.Usage
		var fp string
		if _, err := fmt.Sscanf(line, "answer %d %d %d %s", &u.InputTokens, &u.OutputTokens, &u.Requests, &fp); err != nil {
			if line == "" {
				continue
			}
			return Log{}, fmt.Errorf("resumetest: log line %q: %w", line, err)
		}
		paid[fp]++
		cost, _ := Prices.Cost(provider.ModelUsage{Model: Model, Usage: u})
		l.Billed.Usage = l.Billed.Usage.Add(u)
		l.Billed.Cost += cost
		l.Billed.MaxCall = max(l.Billed.MaxCall, u.Tokens())
	}
	for fp, n := range paid {
		if n > 1 {
			l.PaidTwice = append(l.PaidTwice, fmt.Sprintf("%d times: the request of fingerprint %s", n, fp))
		}
	}
	slices.Sort(l.PaidTwice)
	return l, nil
}
