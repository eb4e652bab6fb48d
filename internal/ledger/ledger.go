// Package ledger counts model usage by provider and model: every model call
// made under a context that carries a ledger, at any depth and in background
// work, adds to it. Ledgers nest: a sub-agent invocation keeps one of its
// own inside its parent's, and a call adds to both. The AG-UI handler
// reports a top-level run's ledger as RUN_FINISHED's usage, and the
// sub-agent tools report an invocation's on SUBAGENT_FINISHED.
package ledger

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/internal/usage"
	"github.com/deputy-go/deputy/provider"
)

// Ledger is the usage of one run or invocation. It is safe for concurrent
// use: the children of a fan-out add to it from their own goroutines.
type Ledger struct {
	parent  *Ledger
	mu      sync.Mutex
	entries []provider.ModelUsage  // in the order each provider and model first appeared
	first   [1]provider.ModelUsage // entries' first backing array: most invocations use one model
	// earlier is the part of entries that earlier runs of a journaled
	// turn spent (Replay, AddEarlier), by the same index; nil while none.
	earlier []provider.ModelUsage
	// gate: the ledger is that of work that outlives the run that started
	// it (WithGate); the ledgers it is inside count a call of it only when
	// that run does (Charge).
	gate bool
}

type key struct{}

// With returns ctx carrying a new ledger inside the ledger of ctx, if any,
// and the new ledger.
func With(ctx context.Context) (context.Context, *Ledger) {
	l := &Ledger{parent: From(ctx)}
	l.entries = l.first[:0]
	return context.WithValue(ctx, key{}, l), l
}

// WithGate is With for work that outlives the run of ctx that starts it
// (a thread's background job, under run.TrackSpend): the ledgers the new
// one is inside count a model call of the work (Charge) only if that run
// counts it, that is, before it reports its cost (run.AddCall).
func WithGate(ctx context.Context) (context.Context, *Ledger) {
	ctx, l := With(ctx)
	l.gate = true
	return ctx, l
}

// From returns the ledger of ctx, or nil.
func From(ctx context.Context) *Ledger {
	l, _ := ctx.Value(key{}).(*Ledger)
	return l
}

// Add adds m, the usage of one call to m.Model of m.Provider with what it
// cost (m.Cost, 0 when unpriced) and what the prompt cache saved on it
// (m.CacheSaved), to the ledger of ctx and the ledgers it is inside, and
// to what the tool calls it is made under spent (run.AddSpent), ledger or
// not. For a call that cost nothing it does nothing.
func Add(ctx context.Context, m provider.ModelUsage) {
	if m.Usage.IsZero() {
		return
	}
	for l := From(ctx); l != nil; l = l.parent {
		l.add(m, false)
	}
	run.AddSpent(ctx, m.Usage)
}

// Charge counts one model call made under ctx, m (its cost in m.Cost, 0
// when unpriced, and what the prompt cache saved on it in m.CacheSaved):
// in the cost of the runs it is made under when cost is set (it is priced,
// or unpriced names the model its prices lack: run.AddCost), and in the
// ledgers of ctx as Add does (AddEarlier, when earlier is set, for a call
// an earlier run of the turn paid for). Under work that outlives the run
// that started it (WithGate), the ledgers outside the work's count the
// call in the same step as that run counts its cost (run.AddCall): both,
// or, once the run has reported its cost, neither.
func Charge(ctx context.Context, m provider.ModelUsage, unpriced string, cost, earlier bool) {
	var gate *Ledger
	if !m.Usage.IsZero() {
		for l := From(ctx); l != nil; l = l.parent {
			l.add(m, earlier)
			if l.gate {
				gate = l
				break
			}
		}
	}
	switch {
	case gate != nil:
		run.AddCall(ctx, m, unpriced, func() {
			for l := gate.parent; l != nil; l = l.parent {
				l.add(m, earlier)
			}
		})
	case cost:
		run.AddCost(ctx, m.Cost, m.CacheSaved, unpriced)
	}
	if !m.Usage.IsZero() {
		run.AddSpent(ctx, m.Usage)
	}
}

// AddEarlier is Add for usage an earlier run of the journaled turn spent,
// which a run replays from the journal: it counts in the entries as any
// other, and is marked as earlier (see Encode).
func AddEarlier(ctx context.Context, m provider.ModelUsage) {
	if m.Usage.IsZero() {
		return
	}
	for l := From(ctx); l != nil; l = l.parent {
		l.add(m, true)
	}
	run.AddSpent(ctx, m.Usage)
}

func (l *Ledger) add(m provider.ModelUsage, earlier bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := 0
	for ; i < len(l.entries); i++ {
		if e := &l.entries[i]; e.Provider == m.Provider && e.Model == m.Model {
			*e = e.Add(m)
			break
		}
	}
	if i == len(l.entries) {
		l.entries = append(l.entries, m)
	}
	if earlier {
		for len(l.earlier) <= i {
			l.earlier = append(l.earlier, provider.ModelUsage{})
		}
		l.earlier[i] = l.earlier[i].Add(m)
	}
}

// Replay counts, under ctx, the work of a finished call replayed from a
// journal — a tool call's result, a sub-agent's invocation — as spent
// again by the run of ctx, without paying for it again: what each model of
// it cost (models, as the call's own ledger had it when it finished) in the
// ledgers of ctx and the run's cost (run.AddCost), and all of it, usage
// included (whose part no model accounts for a tool reported itself), as
// spent by an earlier run of the turn (run.AddEarlier). The caller folds
// usage into its run's ChildUsage, as the result's Usage.
//
// Under work that outlives the run that started it (WithGate), the
// ledgers outside the work's and that run's cost count the models in one
// step (run.AddCalls), as Charge counts one call: all of them, or, once
// the run has reported its cost, none, for the run that takes the work.
func Replay(ctx context.Context, usage provider.Usage, models []provider.ModelUsage) {
	var gate *Ledger
	var dollars float64
	for _, m := range models {
		dollars += m.Cost
		if m.Usage.IsZero() {
			continue
		}
		for l := From(ctx); l != nil; l = l.parent {
			l.add(m, true)
			if l.gate {
				gate = l
				break
			}
		}
		run.AddSpent(ctx, m.Usage)
	}
	if gate != nil {
		run.AddCalls(ctx, models, func() {
			for _, m := range models {
				if !m.Usage.IsZero() {
					for l := gate.parent; l != nil; l = l.parent {
						l.add(m, true)
					}
				}
			}
		})
	} else {
		for _, m := range models {
			if m.Cost > 0 || m.CacheSaved != 0 {
				run.AddCost(ctx, m.Cost, m.CacheSaved, "")
			}
		}
	}
	run.AddEarlier(ctx, usage, dollars)
}

// Entries returns the ledger's entries, one per provider and model, in the
// order they first spent. A nil Ledger has none.
func (l *Ledger) Entries() []provider.ModelUsage {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]provider.ModelUsage(nil), l.entries...)
}

// Earlier returns the part of each entry that earlier runs of a journaled
// turn spent (Replay, AddEarlier), with its provider and model; entries
// with none are left out.
func (l *Ledger) Earlier() []provider.ModelUsage {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []provider.ModelUsage
	for i, e := range l.earlier {
		if !e.Usage.IsZero() || e.Cost != 0 {
			out = append(out, provider.ModelUsage{Provider: l.entries[i].Provider, Model: l.entries[i].Model, Usage: e.Usage, Cost: e.Cost, CacheSaved: e.CacheSaved})
		}
	}
	return out
}

// Unreplayed returns what paid records that earlier is short of, per
// provider and model (paid: what earlier runs of a journaled turn paid for
// a piece of work; earlier: what this run has counted of it, as Earlier
// returns it), and its sum: the part of the work's earlier spending this
// run has not replayed.
func Unreplayed(paid, earlier []provider.ModelUsage) (provider.Usage, []provider.ModelUsage) {
	var total provider.Usage
	var missing []provider.ModelUsage
	for _, p := range paid {
		var got provider.ModelUsage
		for _, e := range earlier {
			if e.Provider == p.Provider && e.Model == p.Model {
				got = e
				break
			}
		}
		u := usage.Less(p.Usage, got.Usage)
		if u.IsZero() {
			continue
		}
		// What the cache saved is a difference too, and below nought
		// where cache writes cost more than reads saved.
		missing = append(missing, provider.ModelUsage{Provider: p.Provider, Model: p.Model, Usage: u, Cost: max(p.Cost-got.Cost, 0), CacheSaved: p.CacheSaved - got.CacheSaved})
		total = total.Add(u)
	}
	return total, missing
}

// Spent returns the ledger's JSON (see JSON) for reported, and the model
// of its first entry ("" when it has none).
func (l *Ledger) Spent(reported provider.Usage) (json.RawMessage, string) {
	if l == nil {
		return encode(nil, nil, reported), ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	model := ""
	if len(l.entries) > 0 {
		model = l.entries[0].Model
	}
	return encode(l.entries, l.earlier, reported), model
}

// Total returns the sum of the entries.
func (l *Ledger) Total() provider.Usage {
	var u provider.Usage
	for _, e := range l.Entries() {
		u = u.Add(e.Usage)
	}
	return u
}

// JSON is the usage of an event: one AG-UI TokenUsage per provider and
// model for the model calls in l (nil: none). Usage reported that no call in l accounts for (an agent that
// calls its model itself) is one more entry, without provider and model.
// Nil when nothing was spent.
//
// A journaled turn that runs more than once reports the whole turn: what
// the runs before this one spent is in the entries, and, per entry, under
// "earlier" (an object with the same counts), the part of it they spent.
func JSON(l *Ledger, reported provider.Usage) json.RawMessage {
	json, _ := l.Spent(reported)
	return json
}

// Encode is JSON for entries already taken from a ledger, all of them
// spent by earlier runs of the turn when earlier is set (a replayed
// invocation's).
func Encode(entries []provider.ModelUsage, reported provider.Usage, earlier bool) json.RawMessage {
	if earlier {
		return encode(entries, entries, reported)
	}
	return encode(entries, nil, reported)
}

// EncodeParts is Encode for entries taken from another runtime's record
// of a run (the temporal module's), with the part of each that earlier
// runs of the turn spent (earlier, matched by provider and model), and,
// after them, the part of reported, which cost dollars in all, that no
// entry accounts for, in one entry without provider and model.
func EncodeParts(entries, earlier []provider.ModelUsage, reported provider.Usage, dollars float64) json.RawMessage {
	all := append([]provider.ModelUsage(nil), entries...)
	var seen provider.Usage
	var seenCost float64
	for _, e := range entries {
		seen, seenCost = seen.Add(e.Usage), seenCost+e.Cost
	}
	rest := provider.ModelUsage{Usage: usage.Less(reported, seen)}
	if rest.Usage.Tokens() > 0 {
		// (A cost no entry accounts for without tokens is left out, as an
		// entry has none.)
		rest.Cost = max(dollars-seenCost, 0)
		all = append(all, rest)
	}
	parts := make([]provider.ModelUsage, len(all))
	for i, e := range all {
		for _, p := range earlier {
			if p.Provider == e.Provider && p.Model == e.Model {
				parts[i] = parts[i].Add(p)
			}
		}
	}
	return encode(all, parts, provider.Usage{})
}

// Record counts m in the ledgers of ctx, as spent by an earlier run of
// the turn when earlier is set, and in nothing else: usage another
// runtime's run spent and counts itself (its cost, its limits), which
// the report of the run of ctx (RUN_FINISHED) names per model.
func Record(ctx context.Context, m provider.ModelUsage, earlier bool) {
	if m.Usage.IsZero() {
		return
	}
	for l := From(ctx); l != nil; l = l.parent {
		l.add(m, earlier)
	}
}

// encode is Encode with the earlier part of each entry, by index.
func encode(entries, earlier []provider.ModelUsage, reported provider.Usage) json.RawMessage {
	var b []byte
	var seen provider.Usage
	for i, e := range entries {
		b = appendTokenUsage(b, e)
		if i < len(earlier) && !earlier[i].Usage.IsZero() {
			// The entry's closing brace gives way to the earlier part.
			b = append(b[:len(b)-1], `,"earlier"`...)
			n := len(b)
			b = appendTokenUsage(b, provider.ModelUsage{Usage: earlier[i].Usage, Cost: earlier[i].Cost, CacheSaved: earlier[i].CacheSaved})
			b[n] = ':' // not the comma that begins an entry
			b = append(b, '}')
		}
		seen = seen.Add(e.Usage)
	}
	rest := usage.Less(reported, seen)
	if rest.Tokens() > 0 {
		b = appendTokenUsage(b, provider.ModelUsage{Usage: rest})
	}
	if len(b) == 0 {
		return nil
	}
	b[0] = '['
	return append(b, ']')
}

// CallJSON is what one call spent, m, as {"usage":[…]}: the usage of an
// event that reports a single call, in one allocation.
func CallJSON(m provider.ModelUsage) json.RawMessage {
	b := make([]byte, 0, 192+len(m.Provider)+len(m.Model))
	b = append(b, `{"usage":`...)
	n := len(b)
	b = appendTokenUsage(b, m)
	b[n] = '[' // not the comma that begins an entry
	return append(b, "]}"...)
}

// Decode reads the usage JSON writes (the AG-UI TokenUsage array an
// event carries), and the part of it earlier runs of the turn spent (see
// agent.Output.Earlier): nothing from JSON it cannot read.
func Decode(raw json.RawMessage) (usage []provider.ModelUsage, earlier provider.Usage, earlierCost float64) {
	type counts struct {
		Input       int64   `json:"inputTokens"`
		Output      int64   `json:"outputTokens"`
		CachedInput int64   `json:"cachedInputTokens"`
		CacheWrite  int64   `json:"cacheWriteInputTokens"`
		Cost        float64 `json:"costUsd"`
		Saved       float64 `json:"cacheSavedUsd"`
	}
	var in []struct {
		Provider string `json:"provider"`
		Model    string `json:"model"`
		counts
		Earlier *counts `json:"earlier"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &in) != nil {
		return nil, earlier, 0
	}
	usage = make([]provider.ModelUsage, len(in))
	for i, u := range in {
		usage[i] = provider.ModelUsage{Provider: u.Provider, Model: u.Model, Usage: provider.Usage{
			InputTokens: u.Input, OutputTokens: u.Output, CacheReadTokens: u.CachedInput, CacheWriteTokens: u.CacheWrite}, Cost: u.Cost, CacheSaved: u.Saved}
		if e := u.Earlier; e != nil {
			earlier = earlier.Add(provider.Usage{InputTokens: e.Input, OutputTokens: e.Output, CacheReadTokens: e.CachedInput, CacheWriteTokens: e.CacheWrite})
			earlierCost += e.Cost
		}
	}
	return usage, earlier, earlierCost
}

// appendTokenUsage appends ",{…}", AG-UI's TokenUsage for the counts of one
// provider and model: inputTokens, outputTokens and totalTokens always,
// provider, model, cachedInputTokens and cacheWriteInputTokens when set;
// and costUsd, what the counts cost in US dollars, when the run had a price
// for them (AG-UI's TokenUsage has no field for it: it travels beside the
// counts it prices, and clients that do not know it drop it), with
// cacheSavedUsd, what the prompt cache saved on them at the same prices
// (provider.Price.Saved; negative when cache writes cost more than reads
// saved), when not zero. Input tokens include the cached ones, as deputy
// counts them too.
func appendTokenUsage(b []byte, m provider.ModelUsage) []byte {
	providerName, model, u, dollars := m.Provider, m.Model, m.Usage, m.Cost
	if b == nil {
		b = make([]byte, 0, 128)
	}
	b = append(b, ",{"...)
	if providerName != "" {
		b = append(b, `"provider":`...)
		b = appendString(b, providerName)
		b = append(b, ',')
	}
	if model != "" {
		b = append(b, `"model":`...)
		b = appendString(b, model)
		b = append(b, ',')
	}
	b = append(b, `"inputTokens":`...)
	b = strconv.AppendInt(b, u.InputTokens, 10)
	b = append(b, `,"outputTokens":`...)
	b = strconv.AppendInt(b, u.OutputTokens, 10)
	b = append(b, `,"totalTokens":`...)
	b = strconv.AppendInt(b, u.InputTokens+u.OutputTokens, 10)
	if u.CacheReadTokens != 0 {
		b = append(b, `,"cachedInputTokens":`...)
		b = strconv.AppendInt(b, u.CacheReadTokens, 10)
	}
	if u.CacheWriteTokens != 0 {
		b = append(b, `,"cacheWriteInputTokens":`...)
		b = strconv.AppendInt(b, u.CacheWriteTokens, 10)
	}
	if dollars > 0 {
		b = append(b, `,"costUsd":`...)
		b = strconv.AppendFloat(b, dollars, 'g', -1, 64)
	}
	if m.CacheSaved != 0 {
		b = append(b, `,"cacheSavedUsd":`...)
		b = strconv.AppendFloat(b, m.CacheSaved, 'g', -1, 64)
	}
	return append(b, '}')
}

// appendString appends s as a JSON string. Names are plain ASCII as a rule;
// anything else goes through encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string cannot fail
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
