package journal

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/provider"
)

// memLog is a Log in memory.
type memLog map[string]Entry

func (l memLog) Turn() string                    { return "turn" }
func (l memLog) Lookup(key string) (Entry, bool) { e, ok := l[key]; return e, ok }
func (l memLog) Record(_ context.Context, key string, e Entry) error {
	l[key] = e
	return nil
}
func (l memLog) Start(key string, e Entry) func(context.Context) error {
	l[key] = e
	return func(context.Context) error { return nil }
}
func (l memLog) Keys(prefix string) []string {
	var keys []string
	for k := range l {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func answer(model string, in, out int64) Entry {
	u := provider.Usage{InputTokens: in, OutputTokens: out, Requests: 1}
	return Entry{Content: "a", Usage: u, Models: []provider.ModelUsage{{Provider: "p", Model: model, Usage: u, Cost: float64(in)}}}
}

// What a piece of work paid for is its record when it stopped unfinished,
// and the model answers under its part of the journal that the record
// does not count: none of them when it was killed before it could write
// the record, those recorded after it when it lags behind. Nothing else
// under the prefix (results, questions' answers, records of what work
// inside it paid for) is an answer.
func TestPaidCountsTheAnswersTheRecordMisses(t *testing.T) {
	call := "run.lead.0/m1/c0"
	in := call + "/x.abc.0/run.x.0"
	base := memLog{
		"run.lead.0/m1":                  answer("m", 100, 1), // the caller's own: not the call's
		in + "/m1":                       answer("m", 10, 1),
		in + "/m1/summary-1":             answer("m", 5, 1),
		in + "/m1/c0":                    {Content: "result", Usage: provider.Usage{InputTokens: 1000}},
		in + "/m1/c0/spent":              {Usage: provider.Usage{InputTokens: 2000}},
		in + "/m1/c0/answer/q":           {Value: []byte(`{}`)},
		in + "/g1":                       {Usage: provider.Usage{InputTokens: 3000}},
		in + "/g1/run.judge.0/m1":        answer("judge", 7, 1),
		call + "/other.def.0/run.y.0/m2": answer("m", 20, 2),
	}
	s := New(base)
	want := func(what string, e Entry, ok bool, u provider.Usage, models map[string]provider.Usage) {
		t.Helper()
		if !ok || e.Usage != u {
			t.Errorf("%s: %+v, %v; want usage %+v", what, e.Usage, ok, u)
		}
		for _, m := range e.Models {
			if m.Usage != models[m.Model] || m.Cost != float64(m.Usage.InputTokens) {
				t.Errorf("%s: %s: %+v, want %+v", what, m.Model, m, models[m.Model])
			}
		}
		if len(e.Models) != len(models) {
			t.Errorf("%s: models %+v, want %d", what, e.Models, len(models))
		}
	}
	e, ok := s.Paid(call)
	want("no record", e, ok, provider.Usage{InputTokens: 42, OutputTokens: 5, Requests: 4},
		map[string]provider.Usage{"m": {InputTokens: 35, OutputTokens: 4, Requests: 3}, "judge": {InputTokens: 7, OutputTokens: 1, Requests: 1}})

	// A record that counts the first answer and something no answer
	// shows (a tool's own usage), not the rest.
	base[call+"/spent"] = Entry{Usage: provider.Usage{InputTokens: 11, OutputTokens: 1, Requests: 1},
		Models: []provider.ModelUsage{{Provider: "p", Model: "m", Usage: provider.Usage{InputTokens: 10, OutputTokens: 1, Requests: 1}, Cost: 10}}}
	e, ok = s.Paid(call)
	want("a record behind", e, ok, provider.Usage{InputTokens: 43, OutputTokens: 5, Requests: 4},
		map[string]provider.Usage{"m": {InputTokens: 35, OutputTokens: 4, Requests: 3}, "judge": {InputTokens: 7, OutputTokens: 1, Requests: 1}})

	// A record that counts everything is all.
	full := Entry{Usage: provider.Usage{InputTokens: 50, OutputTokens: 5, Requests: 4},
		Models: []provider.ModelUsage{{Provider: "p", Model: "m", Usage: provider.Usage{InputTokens: 43, OutputTokens: 4, Requests: 3}, Cost: 43},
			{Provider: "p", Model: "judge", Usage: provider.Usage{InputTokens: 7, OutputTokens: 1, Requests: 1}, Cost: 7}}}
	base[call+"/spent"] = full
	e, ok = s.Paid(call)
	want("a full record", e, ok, full.Usage,
		map[string]provider.Usage{"m": {InputTokens: 43, OutputTokens: 4, Requests: 3}, "judge": {InputTokens: 7, OutputTokens: 1, Requests: 1}})

	if e, ok := s.Paid("run.lead.0/m1/c9"); ok {
		t.Errorf("a call that paid nothing: %+v", e)
	}
}

// What the cache saved on the answers a record does not count is added
// to the record's as it is, below nought too: an answer that wrote its
// prompt to the cache cost more than it would have uncached.
func TestPaidCountsWhatTheCacheSavedTheAnswersTheRecordMisses(t *testing.T) {
	call := "run.lead.0/m1/c0"
	in := call + "/x.abc.0/run.x.0"
	read, wrote := answer("m", 10, 1), answer("m", 20, 1)
	read.Models[0].CacheSaved = 0.5
	wrote.Models[0].CacheSaved = -0.75
	base := memLog{in + "/m1": read, in + "/m2": wrote}
	base[call+"/spent"] = Entry{Usage: read.Usage, Models: read.Models}
	e, ok := New(base).Paid(call)
	if !ok || len(e.Models) != 1 || e.Models[0].CacheSaved != -0.25 || e.Models[0].Cost != 30 {
		t.Errorf("paid %+v, %v; want $30 with $-0.25 saved by the cache", e, ok)
	}
}

func TestIsAnswer(t *testing.T) {
	for key, want := range map[string]bool{
		"run.a.0/m1":                 true,
		"x/run.a.0/m12":              true,
		"run.a.0/m1/summary-2":       true,
		"run.a.0/m1/c0":              false,
		"run.a.0/m1/spent":           false,
		"run.a.0/m1/in":              false,
		"run.a.0/g1":                 false,
		"m1.abc.0/m1":                false, // a call's invocation named m1, not a run
		"run.a.0/m":                  false,
		"run.a.0/m1x":                false,
		"run.a.0/m1/c0/summary-1":    false,
		"h.0123/run.a.0/m3":          true,
		"run.a.0/m1/c0/x.0/answer/q": false,
	} {
		if got := IsAnswer(key); got != want {
			t.Errorf("IsAnswer(%q) = %v, want %v", key, got, want)
		}
	}
}
