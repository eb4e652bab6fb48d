package run

import (
	"context"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/provider"
)

type seen struct {
	ID, Parent, Name string
	Depth            int
}

func identity(ctx context.Context) seen {
	return seen{ID(ctx), Parent(ctx), Name(ctx), Depth(ctx)}
}

func TestStartKeepsDepthAndNamesParent(t *testing.T) {
	ctx := WithDepth(t.Context(), 2)
	ctx = Start(ctx, "run_a", "a", 0)
	if diff := cmp.Diff(seen{ID: "run_a", Name: "a", Depth: 2}, identity(ctx)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	ctx = Start(ctx, "run_b", "b", 0)
	if diff := cmp.Diff(seen{ID: "run_b", Parent: "run_a", Name: "b", Depth: 2}, identity(ctx)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(seen{}, identity(t.Context())); diff != "" {
		t.Errorf("outside any run (-want +got):\n%s", diff)
	}
}

// A run's values, its context and its end work are shared by everything
// under it, deeper contexts included, and by nothing outside it.
func TestScope(t *testing.T) {
	type k struct{}
	ctx := Start(t.Context(), "run_a", "a", 0)
	inner := WithDepth(context.WithValue(ctx, k{}, "call"), 1)
	calls := 0
	count := func() any { calls++; return new(int) }
	if Local(ctx, k{}, count) != Local(inner, k{}, count) || calls != 1 {
		t.Errorf("a run's value was made %d times, want once", calls)
	}
	if Local(t.Context(), k{}, count) == Local(ctx, k{}, count) {
		t.Error("outside a run, Local returned the run's value")
	}
	if Context(inner) != ctx {
		t.Error("Context under a call is not the run's own")
	}

	var order []int
	for i := range 3 {
		if !OnEnd(inner, func() provider.Usage { order = append(order, i); return provider.Usage{InputTokens: 1} }) {
			t.Fatalf("OnEnd %d refused during the run", i)
		}
	}
	if got := Finish(ctx); got.InputTokens != 3 {
		t.Errorf("Finish returned %+v, want the 3 tokens the end work reported", got)
	}
	if diff := cmp.Diff([]int{2, 1, 0}, order); diff != "" {
		t.Errorf("end work ran out of order, latest first (-want +got):\n%s", diff)
	}
	if OnEnd(ctx, func() provider.Usage { return provider.Usage{} }) {
		t.Error("OnEnd accepted work after the run finished")
	}
	if OnEnd(t.Context(), func() provider.Usage { return provider.Usage{} }) {
		t.Error("OnEnd accepted work outside a run")
	}
}

// Tokens set aside for one call are not promised to another until the
// call settles with what it spent.
func TestReserve(t *testing.T) {
	ctx := Start(t.Context(), "run_a", "a", 1000)
	SetUsed(ctx, 100)
	if n, limited := TokensLeft(ctx); n != 900 || !limited {
		t.Errorf("TokensLeft = %d, %v; want 900, true", n, limited)
	}
	got, limited, g := Reserve(ctx, 600)
	if got != 600 || !limited {
		t.Errorf("Reserve(600) = %d, %v; want 600, true", got, limited)
	}
	if got2, _, g2 := Reserve(ctx, 600); got2 != 300 {
		t.Errorf("second Reserve(600) = %d, want the 300 left", got2)
	} else {
		g2.Settle(0)
	}
	g.Settle(250)
	g.Settle(250) // a second settle does nothing
	if n, _ := TokensLeft(ctx); n != 650 {
		t.Errorf("after settling 250, TokensLeft = %d, want 650", n)
	}

	unlimited := Start(t.Context(), "run_b", "b", 0)
	if got, limited, _ := Reserve(unlimited, 600); got != 600 || limited {
		t.Errorf("Reserve without a limit = %d, %v; want 600, false", got, limited)
	}
	if _, limited := TokensLeft(unlimited); limited {
		t.Error("a run without a limit reports one")
	}
}

func TestPositionIsTheChainOfCallsThatLedToTheRun(t *testing.T) {
	ctx := Start(context.Background(), "r1", "lead", 0)
	if got := Position(ctx); got != "lead" {
		t.Fatalf("top-level position %q, want lead", got)
	}
	step, _ := AtStep(ctx, Step{N: 2, Calls: []provider.ToolCall{{ID: "a"}, {ID: "b"}, {ID: "c"}}})
	call := AtCall(step, "c")
	if got := Position(call); got != "lead/@2.2" {
		t.Errorf("inside a call: %q, want lead/@2.2", got)
	}
	child := Start(WithDepth(call, 1), "r2", "critic", 0)
	if got := Position(child); got != "lead/critic@2.2" {
		t.Errorf("child: %q, want lead/critic@2.2", got)
	}
	childStep, _ := AtStep(child, Step{N: 1, Calls: []provider.ToolCall{{ID: "x"}}})
	grand := Start(AtCall(childStep, "x"), "r3", "fact", 0)
	if got := Position(grand); got != "lead/critic@2.2/fact@1.0" {
		t.Errorf("grandchild: %q", got)
	}
	// A run started outside a step's call has no call
	// place; a call that is none of the step's has none either.
	if got := Position(Start(step, "r4", "job", 0)); got != "lead/job" {
		t.Errorf("outside a call: %q, want lead/job", got)
	}
	if got := Position(Start(AtCall(step, "zz"), "r5", "odd", 0)); got != "lead/odd" {
		t.Errorf("an unknown call: %q, want lead/odd", got)
	}
	// One started under the run's own context marked with a call's place
	// (a background job) has that place.
	if got := Position(Start(AtCallOf(call, Context(call)), "r6", "job", 0)); got != "lead/job@2.2" {
		t.Errorf("a job started by a call: %q, want lead/job@2.2", got)
	}
	if got := AtCallOf(step, Context(step)); got != Context(step) {
		t.Error("outside a call, AtCallOf changes the context")
	}
	if got := AtCallOf(call, Context(child)); got != Context(child) {
		t.Error("AtCallOf marks a context of another run")
	}
	// It carries the depth of the call's context, in the same layer.
	if got := AtCallOf(WithDepth(call, 3), Context(call)); Depth(got) != 3 || Position(Start(got, "r7", "job", 0)) != "lead/job@2.2" {
		t.Errorf("AtCallOf of a call at depth 3: depth %d, position %q", Depth(got), Position(Start(got, "r7", "job", 0)))
	}
	if got := AtCallOf(WithDepth(step, 2), Context(step)); Depth(got) != 2 {
		t.Errorf("AtCallOf outside a call at depth 2: depth %d", Depth(got))
	}
	if AtCall(context.Background(), "a") != context.Background() || Position(context.Background()) != "" {
		t.Error("outside a run, AtCall changes the context or Position is not empty")
	}
}

// A depth set outside any run, as a worker that runs another process's
// tool call sets it, has a place: that depth, no path, and the owner and
// thread of the context.
func TestPlaceOfADepthOutsideARun(t *testing.T) {
	ctx := WithOwner(WithThread(context.Background(), "t1"), "acme")
	path, depth, id, owner, thread := Place(WithDepth(ctx, 2))
	if path != "" || depth != 2 || id != "" || owner != "acme" || thread != "t1" {
		t.Errorf("Place = %q, %d, %q, %q, %q; want \"\", 2, \"\", acme, t1", path, depth, id, owner, thread)
	}
}

// A place set outside any run, as a worker that runs a call of a run
// elsewhere sets it, is that run's path and depth, and a run started
// under it is that run's child.
func TestPlaceOfARunElsewhere(t *testing.T) {
	ctx := WithPlace(WithOwner(context.Background(), "acme"), "lead/researcher", 1)
	path, depth, _, owner, _ := Place(ctx)
	if path != "lead/researcher" || depth != 1 || owner != "acme" {
		t.Errorf("Place = %q, %d, owner %q; want lead/researcher, 1, acme", path, depth, owner)
	}
	child := Start(WithDepth(ctx, 2), "r2", "critic", 0)
	defer Finish(child)
	if path, depth, _, _, _ := Place(child); path != "lead/researcher/critic" || depth != 2 {
		t.Errorf("a run started under it is at %q, depth %d; want lead/researcher/critic, 2", path, depth)
	}
	if got := Path(Start(child, "r3", "leaf", 0)); got != "lead/researcher/critic/leaf" {
		t.Errorf("its child is at %q", got)
	}
}

// Work that outlives the run that started it counts its cost in that run
// until the run reports its cost (CloseCost), and after that only in its
// own record, whose Uncounted is what the run did not report.
func TestSpendAfterCloseCost(t *testing.T) {
	lead := Start(context.Background(), "lead", "lead", 0)
	wctx, sp := TrackSpend(lead, lead)
	work := Start(wctx, "job", "job", 0)
	AddCost(work, 1, 0, "")
	if got := sp.Uncounted(); got != 0 {
		t.Fatalf("before the run closes, Uncounted = %v, want 0", got)
	}
	Finish(lead)
	AddCost(work, 2, 0, "") // after the wind-up, before the report: the run's
	cost, _, _, _ := CloseCost(lead)
	if cost != 3 {
		t.Fatalf("the run reports $%v, want $3", cost)
	}
	AddCost(work, 4, 0, "")
	if c, _ := Cost(lead); c != 3 {
		t.Errorf("after it reported, the run's cost is $%v, want $3", c)
	}
	if c, _ := Cost(work); c != 7 {
		t.Errorf("the work's own run cost $%v, want $7", c)
	}
	if got := sp.Uncounted(); got != 4 {
		t.Errorf("Uncounted = $%v, want $4, what the run did not report", got)
	}
}

// A child's path is its parent's and its name, whatever runs before it
// built (a table keeps the paths built, a slot for many); a path built
// before is given again without a new string.
func TestChildPathsAreRightAndReused(t *testing.T) {
	path := func(up, name string) string {
		ctx := Start(t.Context(), "run_"+up, up, 0)
		return Path(Start(ctx, "run_"+name, name, 0))
	}
	for round := range 2 {
		for i := range 600 { // more than the table's slots
			up, name := "lead"+strconv.Itoa(i%37), "child"+strconv.Itoa(i)
			if got := path(up, name); got != up+"/"+name {
				t.Fatalf("round %d: the path of %s under %s is %q", round, name, up, got)
			}
		}
	}
	up, name := "lead", "researcher"
	childPath(up, name)
	if n := testing.AllocsPerRun(100, func() { childPath(up, name) }); n != 0 {
		t.Errorf("a path built before costs %v allocations", n)
	}
}

// A run started under a tool call of a step that shared out its budget,
// by the user's own tool rather than a sub-agent tool, draws on the
// call's share: half of what it has left, tokens and dollars, since the
// tool may start more; what it neither spent nor needs for its answer to
// be read goes back to the share as it settles, for the next. A run a
// sub-agent tool starts (ForRun) takes nothing itself.
func TestRunUnderAToolCallDrawsOnTheCallsShare(t *testing.T) {
	lead := Start(t.Context(), "run_lead", "lead", 1000)
	SetCostLimit(lead, 1)
	calls := []provider.ToolCall{{ID: "c1", Name: "team"}}
	step, sh := AtStep(lead, Step{N: 1, Calls: calls, Share: true, Keep: 100, Price: provider.Price{Input: 0.001}})
	call := AtCall(step, "c1")
	// 900 left after what is kept, in two: a share of 450 for the call.
	first := Start(call, "run_w1", "writer", 0)
	if got := Limit(first); got != 225 {
		t.Errorf("the first run's token limit is %d, want 225, half the call's share", got)
	}
	if left, _ := CostLeft(first); left != 0.25 {
		t.Errorf("the first run may spend $%v, want $0.25, half the call's share of $0.50", left)
	}
	AddCost(first, 0.05, 0, "")
	Settle(first, 100, 20) // 225-100-20 = 105 back: 330 left
	second := Start(call, "run_w2", "writer", 0)
	if got := Limit(second); got != 165 {
		t.Errorf("the second run's token limit is %d, want 165, half of what the first left", got)
	}
	// $0.25 + $0.25 - $0.05 - 20 tokens at $0.001 = $0.43 left, in two.
	if left, _ := CostLeft(second); left < 0.2149 || left > 0.2151 {
		t.Errorf("the second run may spend $%v, want $0.215", left)
	}
	given, _ := ForRun(call, 50, 0)
	if got := Limit(Start(given, "run_w3", "writer", 0)); got != 50 {
		t.Errorf("a run a tool gave 50 tokens has a limit of %d", got)
	}
	Settle(second, 0, 0)
	SetUsed(lead, 200) // the lead's own 100 and the first run's 100
	sh.Release()
	if n, _ := TokensLeft(lead); n != 800 {
		t.Errorf("after the step, %d tokens left, want 800", n)
	}
}
