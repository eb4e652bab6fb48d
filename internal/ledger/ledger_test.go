package ledger_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
)

// A call adds to its own ledger and every ledger it is inside, and to none
// beside it.
func TestLedgersNest(t *testing.T) {
	ctx, run := ledger.With(context.Background())
	child, inChild := ledger.With(ctx)
	sibling, inSibling := ledger.With(ctx)
	grand, inGrand := ledger.With(child)

	ledger.Add(ctx, provider.ModelUsage{Provider: "acme", Model: "big", Usage: provider.Usage{Requests: 1, InputTokens: 100, OutputTokens: 10}})
	ledger.Add(child, provider.ModelUsage{Provider: "acme", Model: "mid", Usage: provider.Usage{Requests: 1, InputTokens: 20, OutputTokens: 2}})
	ledger.Add(grand, provider.ModelUsage{Provider: "other", Model: "small", Usage: provider.Usage{Requests: 1, InputTokens: 3, OutputTokens: 1}})
	ledger.Add(sibling, provider.ModelUsage{Provider: "acme", Model: "mid", Usage: provider.Usage{Requests: 1, InputTokens: 5}})
	ledger.Add(grand, provider.ModelUsage{Provider: "other", Model: "small", Usage: provider.Usage{}}) // a replayed call: nothing

	mid := provider.ModelUsage{Provider: "acme", Model: "mid", Usage: provider.Usage{Requests: 2, InputTokens: 25, OutputTokens: 2}}
	small := provider.ModelUsage{Provider: "other", Model: "small", Usage: provider.Usage{Requests: 1, InputTokens: 3, OutputTokens: 1}}
	for _, tt := range []struct {
		name string
		l    *ledger.Ledger
		want []provider.ModelUsage
	}{
		{"run", run, []provider.ModelUsage{{Provider: "acme", Model: "big", Usage: provider.Usage{Requests: 1, InputTokens: 100, OutputTokens: 10}}, mid, small}},
		{"child", inChild, []provider.ModelUsage{{Provider: "acme", Model: "mid", Usage: provider.Usage{Requests: 1, InputTokens: 20, OutputTokens: 2}}, small}},
		{"grandchild", inGrand, []provider.ModelUsage{small}},
		{"sibling", inSibling, []provider.ModelUsage{{Provider: "acme", Model: "mid", Usage: provider.Usage{Requests: 1, InputTokens: 5}}}},
	} {
		if diff := cmp.Diff(tt.want, tt.l.Entries()); diff != "" {
			t.Errorf("%s's entries (-want +got):\n%s", tt.name, diff)
		}
	}
	if got := run.Total(); got != (provider.Usage{Requests: 4, InputTokens: 128, OutputTokens: 13}) {
		t.Errorf("run total %v", got)
	}
	var none *ledger.Ledger
	if none.Entries() != nil || ledger.From(context.Background()) != nil {
		t.Error("no ledger should have no entries")
	}
	ledger.Add(context.Background(), provider.ModelUsage{Provider: "acme", Model: "big", Usage: provider.Usage{InputTokens: 1}}) // no ledger: no panic
}

func TestAddIsSafeForConcurrentUse(t *testing.T) {
	ctx, run := ledger.With(context.Background())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			child, _ := ledger.With(ctx)
			for range 100 {
				ledger.Add(child, provider.ModelUsage{Provider: "acme", Model: "big", Usage: provider.Usage{Requests: 1, InputTokens: 1}})
			}
		})
	}
	wg.Wait()
	if got := run.Total(); got.Requests != 800 || got.InputTokens != 800 {
		t.Errorf("total %v, want 800 requests and tokens", got)
	}
}

func TestJSON(t *testing.T) {
	_, empty := ledger.With(context.Background())
	if got := ledger.JSON(empty, provider.Usage{}); got != nil {
		t.Errorf("nothing spent: %s, want nil", got)
	}
	ctx, l := ledger.With(context.Background())
	ledger.Add(ctx, provider.ModelUsage{Provider: "acme", Model: "big", Usage: provider.Usage{Requests: 1, InputTokens: 100, OutputTokens: 10, CacheReadTokens: 60, CacheWriteTokens: 5}, Cost: 0.0015, CacheSaved: 0.0004})
	ledger.Add(ctx, provider.ModelUsage{Model: "we\"ird\n<model>", Usage: provider.Usage{Requests: 1, InputTokens: 1, OutputTokens: 1}})
	// 30 more input tokens were reported than the calls account for.
	got := ledger.JSON(l, provider.Usage{InputTokens: 131, OutputTokens: 11, CacheReadTokens: 60, CacheWriteTokens: 5})
	want := `[{"provider":"acme","model":"big","inputTokens":100,"outputTokens":10,"totalTokens":110,"cachedInputTokens":60,"cacheWriteInputTokens":5,"costUsd":0.0015,"cacheSavedUsd":0.0004},` +
		`{"model":"we\"ird\n\u003cmodel\u003e","inputTokens":1,"outputTokens":1,"totalTokens":2},` +
		`{"inputTokens":30,"outputTokens":0,"totalTokens":30}]`
	if string(got) != want {
		t.Errorf("JSON:\n got %s\nwant %s", got, want)
	}
	if !json.Valid(got) {
		t.Error("not valid JSON")
	}
}

// What an earlier run of the turn spent, replayed, counts in the entries
// and is marked, per entry, under "earlier"; a ledger above sees both.
func TestEarlierIsMarkedPerEntry(t *testing.T) {
	ctx, run := ledger.With(context.Background())
	child, inChild := ledger.With(ctx)
	ledger.Add(child, provider.ModelUsage{Provider: "acme", Model: "m", Usage: provider.Usage{Requests: 1, InputTokens: 10, OutputTokens: 1}, Cost: 0.5})
	ledger.AddEarlier(child, provider.ModelUsage{Provider: "acme", Model: "m", Usage: provider.Usage{Requests: 1, InputTokens: 20, OutputTokens: 2}, Cost: 1})
	ledger.Replay(ctx, provider.Usage{Requests: 1, InputTokens: 7}, []provider.ModelUsage{{Provider: "acme", Model: "n", Usage: provider.Usage{Requests: 1, InputTokens: 5, CacheReadTokens: 4}, Cost: 0.25, CacheSaved: 0.125}})
	want := `[{"provider":"acme","model":"m","inputTokens":30,"outputTokens":3,"totalTokens":33,"costUsd":1.5,"earlier":{"inputTokens":20,"outputTokens":2,"totalTokens":22,"costUsd":1}},` +
		`{"provider":"acme","model":"n","inputTokens":5,"outputTokens":0,"totalTokens":5,"cachedInputTokens":4,"costUsd":0.25,"cacheSavedUsd":0.125,"earlier":{"inputTokens":5,"outputTokens":0,"totalTokens":5,"cachedInputTokens":4,"costUsd":0.25,"cacheSavedUsd":0.125}},` +
		`{"inputTokens":2,"outputTokens":0,"totalTokens":2}]`
	if got := string(ledger.JSON(run, provider.Usage{InputTokens: 37, OutputTokens: 3})); got != want {
		t.Errorf("the run's usage:\n got %s\nwant %s", got, want)
	}
	if got := string(ledger.JSON(inChild, provider.Usage{})); got != `[{"provider":"acme","model":"m","inputTokens":30,"outputTokens":3,"totalTokens":33,"costUsd":1.5,"earlier":{"inputTokens":20,"outputTokens":2,"totalTokens":22,"costUsd":1}}]` {
		t.Errorf("the child's usage: %s", got)
	}
	// Earlier says what the cache saved on the part spent before, as the
	// work that did not replay it counts it again (Unreplayed).
	if got := run.Earlier(); len(got) != 2 || got[1].CacheSaved != 0.125 || got[1].Cost != 0.25 {
		t.Errorf("earlier %+v: want model n's $0.25, with $0.125 saved by the cache", got)
	}
	var v any
	if err := json.Unmarshal(ledger.JSON(run, provider.Usage{}), &v); err != nil {
		t.Errorf("not JSON: %v", err)
	}
}

func TestUnreplayedIsWhatWasPaidLessWhatWasCounted(t *testing.T) {
	// What the cache saved is carried too, below nought where the
	// unreplayed calls wrote more to the cache than they read from it.
	paid := []provider.ModelUsage{
		{Provider: "p", Model: "a", Usage: provider.Usage{InputTokens: 30, OutputTokens: 6, Requests: 3}, Cost: 0.75, CacheSaved: 0.125},
		{Provider: "p", Model: "b", Usage: provider.Usage{InputTokens: 8, OutputTokens: 2, Requests: 1}, Cost: 0.5, CacheSaved: 0.0625},
	}
	earlier := []provider.ModelUsage{
		{Provider: "p", Model: "a", Usage: provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}, Cost: 0.25, CacheSaved: 0.25},
		{Provider: "q", Model: "a", Usage: provider.Usage{InputTokens: 100, Requests: 1}, Cost: 1}, // another provider's: not this work's
	}
	total, missing := ledger.Unreplayed(paid, earlier)
	want := []provider.ModelUsage{
		{Provider: "p", Model: "a", Usage: provider.Usage{InputTokens: 20, OutputTokens: 4, Requests: 2}, Cost: 0.5, CacheSaved: -0.125},
		{Provider: "p", Model: "b", Usage: provider.Usage{InputTokens: 8, OutputTokens: 2, Requests: 1}, Cost: 0.5, CacheSaved: 0.0625},
	}
	if diff := cmp.Diff(want, missing); diff != "" {
		t.Errorf("missing (-want +got):\n%s", diff)
	}
	if total != (provider.Usage{InputTokens: 28, OutputTokens: 6, Requests: 3}) {
		t.Errorf("total %+v", total)
	}
	// All of it replayed: nothing is missing.
	if total, missing := ledger.Unreplayed(paid, paid); len(missing) != 0 || !total.IsZero() {
		t.Errorf("all replayed: %+v, %+v", total, missing)
	}
}

// A piece of a thread's job replayed from its journal (Replay under a
// WithGate ledger) counts in the run that started the job, or, once that
// run has reported its cost, in neither its cost nor its ledger: the run
// that takes the job counts it then (run.Spend.Uncounted and Owed, and
// the ledger's entries less run.Spend.Counted). Its dollars, its tokens
// and its ledger entries go to the same run, whole, whether the run
// closes before the replay, after it, or while it counts (the replay
// counted the models in the run's ledger after the run had closed, where
// its dollars did not count, and the run that took the job counted them
// again).
func TestReplayUnderAGateCountsInOneRun(t *testing.T) {
	models := []provider.ModelUsage{
		{Provider: "acme", Model: "big", Usage: provider.Usage{Requests: 2, InputTokens: 300, OutputTokens: 20}, Cost: 0.5},
		{Provider: "acme", Model: "small", Usage: provider.Usage{Requests: 1, InputTokens: 40, OutputTokens: 4}, Cost: 0.25},
	}
	all := models[0].Usage.Add(models[1].Usage)
	for _, when := range []string{"before", "after", "racing"} {
		for round := range map[string]int{"before": 1, "after": 1, "racing": 200}[when] {
			lead := run.Start(context.Background(), "lead", "lead", 0)
			lead, outer := ledger.With(lead)
			jctx, sp := run.TrackSpend(lead, lead)
			jctx, gate := ledger.WithGate(jctx)
			job := run.Start(jctx, "job", "job", 0)
			var cost float64
			var lasting provider.Usage
			closed := make(chan struct{})
			closeRun := func() {
				run.Finish(lead)
				cost, _, _, lasting = run.CloseCost(lead)
				close(closed)
			}
			switch when {
			case "before":
				closeRun()
				ledger.Replay(job, all, models)
			case "after":
				ledger.Replay(job, all, models)
				closeRun()
			case "racing":
				go closeRun()
				ledger.Replay(job, all, models)
			}
			<-closed
			counted := sp.Counted()
			var countedUsage provider.Usage
			var countedCost float64
			for _, m := range counted {
				countedUsage = countedUsage.Add(m.Usage)
				countedCost += m.Cost
			}
			if countedUsage != (provider.Usage{}) && countedUsage != all {
				t.Fatalf("closed %s (round %d): the run counts %+v of the replay, want all of it or none", when, round, countedUsage)
			}
			if cost != countedCost || lasting != countedUsage || outer.Total() != countedUsage {
				t.Fatalf("closed %s (round %d): the run reports $%v and %+v (its ledger %+v); the models it counted are %+v, $%v",
					when, round, cost, lasting, outer.Total(), countedUsage, countedCost)
			}
			rest, _ := ledger.Unreplayed(gate.Entries(), counted)
			if got := rest.Add(countedUsage); got != all || sp.Uncounted()+countedCost != 0.75 {
				t.Fatalf("closed %s (round %d): the run counts %+v, the taker %+v and $%v; want %+v and $0.75 over both", when, round, countedUsage, rest, sp.Uncounted(), all)
			}
			if when == "before" && countedUsage != (provider.Usage{}) || when == "after" && countedUsage != all {
				t.Fatalf("closed %s: the run counts %+v of the replay", when, countedUsage)
			}
		}
	}
}
