package treetest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/deputy-go/deputy/subagent"
)

// Case is one input of a Dataset.
type Case struct {
	Name  string `json:"name"`
	Input string `json:"input"`
}

// Dataset runs each of its cases Runs times, scores every run with
// Scorer, and sums up how often each score passed, per case, node and
// evaluator: pass@k (at least one of k runs passes) and pass^k (all k
// pass), estimated from the Runs.
type Dataset struct {
	Cases []Case
	// Runs is how many times each case runs (0: once).
	Runs int
	// K are the k of pass@k and pass^k (none: 1 and Runs); each at most
	// Runs.
	K []int
	// Scorer scores each run.
	Scorer *Scorer
	// Run runs the case once (the i-th time, from 0): its answer and its
	// tree's roots. An error is a run that failed: the evaluator "run"
	// counts it, and nothing else is scored.
	Run func(ctx context.Context, c Case, i int) (answer string, roots []*subagent.Node, err error)
}

// Results is what a Dataset's runs scored, stored as JSON to be the
// baseline of a later run (Compare).
type Results struct {
	Runs  int    `json:"runs"`
	K     []int  `json:"k"`
	Items []Item `json:"items"`
}

// Item is how one evaluator scored one node (or the run: Path "") of one
// case over the runs.
type Item struct {
	Case      string `json:"case"`
	Path      string `json:"path,omitempty"`
	Evaluator string `json:"evaluator"`
	// Passed of Runs passed; Mean is the mean score.
	Passed int     `json:"passed"`
	Runs   int     `json:"runs"`
	Mean   float64 `json:"mean"`
	// PassAt and PassAll are pass@k and pass^k, by k.
	PassAt  map[string]float64 `json:"pass_at"`
	PassAll map[string]float64 `json:"pass_all"`
}

func (it Item) key() string { return it.Case + "\x1f" + it.Path + "\x1f" + it.Evaluator }

// Rate is the share of runs that passed.
func (it Item) Rate() float64 {
	if it.Runs == 0 {
		return 0
	}
	return float64(it.Passed) / float64(it.Runs)
}

// Evaluate runs the dataset, one run after another, and returns what it
// scored. It stops when ctx ends.
func (d *Dataset) Evaluate(ctx context.Context) (*Results, error) {
	if d.Run == nil || d.Scorer == nil {
		return nil, errors.New("treetest: a Dataset needs Run and Scorer")
	}
	n := max(d.Runs, 1)
	ks := d.K
	if len(ks) == 0 {
		ks = []int{1}
		if n > 1 {
			ks = append(ks, n)
		}
	}
	for _, k := range ks {
		if k < 1 || k > n {
			return nil, fmt.Errorf("treetest: k %d of pass@k is not between 1 and Runs (%d)", k, n)
		}
	}
	type acc struct {
		item Item
		sum  float64
	}
	byKey := map[string]*acc{}
	var order []string
	add := func(s Score, c string) {
		it := Item{Case: c, Path: s.Path, Evaluator: s.Evaluator}
		a := byKey[it.key()]
		if a == nil {
			a = &acc{item: it}
			byKey[it.key()] = a
			order = append(order, it.key())
		}
		a.item.Runs++
		a.sum += s.Value
		if s.Pass {
			a.item.Passed++
		}
	}
	for _, c := range d.Cases {
		for i := range n {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			answer, roots, err := d.Run(ctx, c, i)
			add(verdictOf(err), c.Name)
			if err != nil {
				continue
			}
			for _, s := range d.Scorer.Score(ctx, answer, roots).Scores {
				add(s, c.Name)
			}
		}
	}
	res := &Results{Runs: n, K: ks}
	for _, k := range order {
		a := byKey[k]
		it := a.item
		it.Mean = a.sum / float64(it.Runs)
		it.PassAt, it.PassAll = map[string]float64{}, map[string]float64{}
		for _, k := range ks {
			it.PassAt[strconv.Itoa(k)] = passAt(it.Runs, it.Passed, k)
			it.PassAll[strconv.Itoa(k)] = passAll(it.Runs, it.Passed, k)
		}
		res.Items = append(res.Items, it)
	}
	return res, nil
}

func verdictOf(err error) Score {
	s := verdict(err == nil, "the run ended without an error")
	if err != nil {
		s.Explanation = clip(err.Error(), 300)
	}
	s.Evaluator = "run"
	return s
}

// passAt is the unbiased estimate, from n runs of which c passed, that at
// least one of k runs passes: 1 - C(n-c, k) / C(n, k).
func passAt(n, c, k int) float64 {
	if k > n {
		return 0
	}
	if n-c < k {
		return 1
	}
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p
}

// passAll is the estimate that all of k runs pass: C(c, k) / C(n, k).
func passAll(n, c, k int) float64 {
	if k > n || c < k {
		return 0
	}
	p := 1.0
	for i := range k {
		p *= float64(c-i) / float64(n-i)
	}
	return p
}

// ReadResults reads results written as JSON (encoding/json of a
// *Results), at most 16 MiB of them.
func ReadResults(r io.Reader) (*Results, error) {
	var res Results
	d := json.NewDecoder(io.LimitReader(r, 16<<20))
	d.DisallowUnknownFields()
	if err := d.Decode(&res); err != nil {
		return nil, fmt.Errorf("treetest: reading results: %w", err)
	}
	return &res, nil
}

// Change is how one item moved from a baseline.
type Change struct {
	Case      string  `json:"case"`
	Path      string  `json:"path,omitempty"`
	Evaluator string  `json:"evaluator"`
	Before    float64 `json:"before"` // the baseline's pass rate (-1: not in it)
	After     float64 `json:"after"`  // the pass rate now (-1: no longer scored)
	MeanDelta float64 `json:"mean_delta"`
}

// Comparison is what improved and what regressed against a baseline.
type Comparison struct {
	Improved  []Change `json:"improved"`
	Regressed []Change `json:"regressed"`
	Same      int      `json:"same"`
}

// Compare compares r with baseline, item by item: an item whose pass rate
// went up improved, one whose rate went down (or that is no longer
// scored) regressed; a new item counts as improved when it passes at
// all, else as regressed.
func (r *Results) Compare(baseline *Results) Comparison {
	var c Comparison
	old := map[string]Item{}
	for _, it := range baseline.Items {
		old[it.key()] = it
	}
	seen := map[string]bool{}
	for _, it := range r.Items {
		seen[it.key()] = true
		ch := Change{Case: it.Case, Path: it.Path, Evaluator: it.Evaluator, Before: -1, After: it.Rate()}
		b, ok := old[it.key()]
		if ok {
			ch.Before, ch.MeanDelta = b.Rate(), it.Mean-b.Mean
		}
		switch {
		case ok && ch.After > ch.Before, !ok && ch.After > 0:
			c.Improved = append(c.Improved, ch)
		case ok && ch.After < ch.Before, !ok:
			c.Regressed = append(c.Regressed, ch)
		default:
			c.Same++
		}
	}
	for _, b := range baseline.Items {
		if !seen[b.key()] {
			c.Regressed = append(c.Regressed, Change{Case: b.Case, Path: b.Path, Evaluator: b.Evaluator, Before: b.Rate(), After: -1})
		}
	}
	order := func(a, b Change) int {
		return cmp.Or(cmp.Compare(a.Case, b.Case), cmp.Compare(a.Path, b.Path), cmp.Compare(a.Evaluator, b.Evaluator))
	}
	slices.SortFunc(c.Improved, order)
	slices.SortFunc(c.Regressed, order)
	return c
}

// Markdown is the comparison as a Markdown report.
func (c Comparison) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Against the baseline\n\n%d improved, %d regressed, %d the same.\n", len(c.Improved), len(c.Regressed), c.Same)
	table := func(title string, changes []Change) {
		if len(changes) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n### %s\n\n| case | node | evaluator | before | after | mean score |\n|---|---|---|---|---|---|\n", title)
		for _, ch := range changes {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %+.2f |\n", cell(ch.Case), cell(or(ch.Path, "(run)")), cell(ch.Evaluator), rate(ch.Before), rate(ch.After), ch.MeanDelta)
		}
	}
	table("Regressed", c.Regressed)
	table("Improved", c.Improved)
	return b.String()
}

// Markdown is the results as a Markdown table.
func (r *Results) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| case | node | evaluator | passed | mean |")
	for _, k := range r.K {
		fmt.Fprintf(&b, " pass@%d | pass^%d |", k, k)
	}
	b.WriteString("\n|---|---|---|---|---|" + strings.Repeat("---|---|", len(r.K)) + "\n")
	for _, it := range r.Items {
		fmt.Fprintf(&b, "| %s | %s | %s | %d/%d | %.2f |", cell(it.Case), cell(or(it.Path, "(run)")), cell(it.Evaluator), it.Passed, it.Runs, it.Mean)
		for _, k := range r.K {
			fmt.Fprintf(&b, " %.2f | %.2f |", it.PassAt[strconv.Itoa(k)], it.PassAll[strconv.Itoa(k)])
		}
		b.WriteString("\n")
	}
	return b.String()
}

func rate(r float64) string {
	if r < 0 {
		return "—"
	}
	return strconv.Itoa(int(r*100+0.5)) + "%"
}

// cell escapes a table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
