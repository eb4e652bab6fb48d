package run

import (
	"context"
	"errors"
	"testing"
)

// outerTurn is an OuterTurn that records how it is taken.
type outerTurn struct {
	tokens  int64
	dollars float64
	ok      bool
	err     error
	taken   int
	done    [][2]float64
}

func (o *outerTurn) Take(context.Context) (int64, float64, bool, error) {
	o.taken++
	return o.tokens, o.dollars, o.ok, o.err
}

func (o *outerTurn) Done(tokens int64, dollars float64) {
	o.done = append(o.done, [2]float64{float64(tokens), dollars})
}

// A call that may pass its run's limits takes the outer tree's turn too,
// from the context of its tree's top run: it plans with the outer tree's
// debt, which counts this tree's calls, and ends that turn with what it
// passed its run's limits by. Without an outer turn, or when it cannot
// be had, the tree's own debt counts; an outer turn that fails fails the
// call, and gives the tree's turn back.
func TestUncoveredTakesTheOuterTurn(t *testing.T) {
	o := &outerTurn{tokens: 70, dollars: 0.5, ok: true}
	top := Start(WithOuterTurn(t.Context(), o), "run_top", "top", 1000)
	child := Start(top, "run_child", "child", 100)
	d, err := Uncovered(child)
	if err != nil {
		t.Fatal(err)
	}
	if tokens, dollars := d.Debt(); tokens != 70 || dollars != 0.5 || o.taken != 1 {
		t.Errorf("debt %d, $%v after %d takes of the outer turn; want the outer tree's, 70 and $0.5, taken once", tokens, dollars, o.taken)
	}
	d.Left(100, 1)
	d.Done(130, 1.25)
	if len(o.done) != 1 || o.done[0] != [2]float64{30, 0.25} {
		t.Errorf("the outer turn was ended with %v, want once, with what the call passed its run's limits by: 30 tokens, $0.25", o.done)
	}
	// The tree's own debt counts the call too, for when no outer turn
	// can be had.
	o.ok = false
	d, err = Uncovered(child)
	if err != nil {
		t.Fatal(err)
	}
	if tokens, dollars := d.Debt(); tokens != 30 || dollars != 0.25 {
		t.Errorf("debt %d, $%v with no outer turn to be had; want the tree's own, 30 and $0.25", tokens, dollars)
	}
	d.Done(0, 0)
	if len(o.done) != 1 {
		t.Errorf("an outer turn not had was ended: %v", o.done)
	}
	o.err = errors.New("the tree's workflow is gone")
	if _, err := Uncovered(child); !errors.Is(err, o.err) {
		t.Errorf("Uncovered with an outer turn failing: %v, want its error", err)
	}
	o.err = nil
	done := make(chan struct{})
	go func() {
		defer close(done)
		if d, err := Uncovered(child); err == nil {
			d.Done(0, 0)
		}
	}()
	<-done // the failed take gave the tree's turn back
	// A run outside any tree with an outer turn takes none.
	plain := Start(t.Context(), "run_plain", "plain", 10)
	taken := o.taken
	d, err = Uncovered(plain)
	if err != nil {
		t.Fatal(err)
	}
	d.Done(0, 0)
	if o.taken != taken {
		t.Error("a tree started without an outer turn took it")
	}
}

// A call that takes the outer turn plans with no less than its own tree's
// debt: the outer tree never heard of the calls that went without its
// turn (it could not be asked), and they passed their limits all the same.
func TestUncoveredOuterTurnKeepsTheTreesDebt(t *testing.T) {
	o := &outerTurn{}
	top := Start(WithOuterTurn(t.Context(), o), "run_top", "top", 1000)
	d, err := Uncovered(top)
	if err != nil {
		t.Fatal(err)
	}
	d.Left(100, 1)
	d.Done(130, 1.25) // without the outer turn: 30 tokens, $0.25 over
	o.ok = true       // the outer tree answers again, knowing none of it
	d, err = Uncovered(top)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Done(0, 0)
	if tokens, dollars := d.Debt(); tokens != 30 || dollars != 0.25 {
		t.Errorf("debt %d, $%v once the outer turn is had again; want at least the tree's own, 30 and $0.25", tokens, dollars)
	}
}
