package treetest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
)

// critic is a tree of one critic that answered text.
func critic(text string) []*subagent.Node {
	r, _ := json.Marshal(text)
	return []*subagent.Node{{Name: "critic", State: subagent.StateSucceeded, Result: r}}
}

func TestADatasetRunManyTimesIsScoredAndComparedWithItsBaseline(t *testing.T) {
	d := &treetest.Dataset{
		Cases: []treetest.Case{{Name: "flaky", Input: "a"}, {Name: "steady", Input: "b"}, {Name: "broken", Input: "c"}},
		Runs:  4,
		Scorer: &treetest.Scorer{Rules: []treetest.Rule{
			{Pattern: "critic", Evaluators: []treetest.Evaluator{treetest.Contains("holds")}},
			{Evaluators: []treetest.Evaluator{treetest.Contains("done")}},
		}},
		Run: func(ctx context.Context, c treetest.Case, i int) (string, []*subagent.Node, error) {
			switch {
			case c.Name == "flaky" && i == 3:
				return "done", critic("it breaks"), nil
			case c.Name == "broken" && i == 1:
				return "", nil, errors.New("the provider is down")
			}
			return "done", critic("it holds"), nil
		},
	}
	res, err := d.Evaluate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	item := func(r *treetest.Results, c, path, ev string) treetest.Item {
		for _, it := range r.Items {
			if it.Case == c && it.Path == path && it.Evaluator == ev {
				return it
			}
		}
		t.Fatalf("no item %s %s %s in %+v", c, path, ev, r.Items)
		return treetest.Item{}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	f := item(res, "flaky", "critic", "contains")
	if f.Passed != 3 || f.Runs != 4 || !near(f.PassAt["1"], 0.75) || !near(f.PassAt["4"], 1) || !near(f.PassAll["1"], 0.75) || !near(f.PassAll["4"], 0) {
		t.Errorf("flaky critic: %+v", f)
	}
	if b := item(res, "broken", "", "run"); b.Passed != 3 || !near(b.PassAll["4"], 0) {
		t.Errorf("broken run: %+v", b)
	}
	if s := item(res, "steady", "critic", "contains"); !near(s.PassAll["4"], 1) {
		t.Errorf("steady critic: %+v", s)
	}

	// Stored as JSON, read back as the baseline of a run where the flaky
	// case always fails and the broken one is fixed.
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(res); err != nil {
		t.Fatal(err)
	}
	base, err := treetest.ReadResults(&buf)
	if err != nil {
		t.Fatal(err)
	}
	d.Run = func(ctx context.Context, c treetest.Case, i int) (string, []*subagent.Node, error) {
		if c.Name == "flaky" {
			return "done", critic("it breaks"), nil
		}
		return "done", critic("it holds"), nil
	}
	now, err := d.Evaluate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cmp := now.Compare(base)
	if len(cmp.Regressed) != 1 || cmp.Regressed[0].Case != "flaky" || cmp.Regressed[0].Path != "critic" {
		t.Errorf("regressed: %+v", cmp.Regressed)
	}
	if len(cmp.Improved) != 1 || cmp.Improved[0].Case != "broken" || cmp.Improved[0].Evaluator != "run" {
		t.Errorf("improved: %+v", cmp.Improved)
	}
	md := cmp.Markdown()
	for _, want := range []string{"1 improved, 1 regressed", "| flaky | critic | contains | 75% | 0% |", "| broken | (run) | run | 75% | 100% |"} {
		if !strings.Contains(md, want) {
			t.Errorf("the report does not say %q:\n%s", want, md)
		}
	}
	if table := now.Markdown(); !strings.Contains(table, "| flaky | critic | contains | 0/4 | 0.00 | 0.00 | 0.00 | 0.00 | 0.00 |") {
		t.Errorf("results table:\n%s", table)
	}
	if _, err := (&treetest.Dataset{Runs: 2, K: []int{3}, Scorer: d.Scorer, Run: d.Run}).Evaluate(context.Background()); err == nil {
		t.Error("a k above Runs was taken")
	}
	if _, err := treetest.ReadResults(strings.NewReader(`{"runs":1,"bogus":2}`)); err == nil {
		t.Error("results with an unknown field were read")
	}
}
