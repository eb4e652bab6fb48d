package browsertest

import (
	"cmp"
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// row is what the timeline shows of one node: its bar and the parts of it
// queued for admission and waiting for a person, in pixels.
type row struct {
	Node, Name, Status string
	Track, Left, Width float64
	Queued, Waiting    []float64 // each segment's width
}

const readRows = `[...document.querySelector(".run .timeline").querySelectorAll(".row")].map((r) => {
	const track = r.querySelector(".track").getBoundingClientRect();
	const bar = r.querySelector("i.span").getBoundingClientRect();
	const widths = (cls) => [...r.querySelectorAll("i." + cls)].map((el) => el.getBoundingClientRect().width);
	return {Node: r.dataset.node || "", Name: r.dataset.name, Status: r.dataset.status, Track: track.width, Left: bar.left - track.left, Width: bar.width,
		Queued: widths("queued"), Waiting: widths("waiting")};
})`

// TestTimeline runs the small tree with each model call taking 400 ms and
// two let through at once: while the lead runs, its tokens climb call by
// call; the approval is answered after a person's pause; then the
// timeline holds a row per node, in the tree's order, each bar as long as
// the node ran by the recorded events' clock, the person's wait and the
// time queued for admission drawn apart; a folded node folds its rows, and
// a row clicked selects its node in the tree.
func TestTimeline(t *testing.T) {
	srv := serve(t, "-pace", "400ms", "-inflight", "2")
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.url), chromedp.WaitVisible(chromedp.ID("run"))); err != nil {
		t.Fatal(err)
	}
	thread, err := chromedp.Run(ctx, chromedp.Value(chromedp.ID("thread")))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("run"))); err != nil {
		t.Fatal(err)
	}
	// The lead's first call has ended; the lead runs on, its sub-agents
	// under way, and shows what it spent so far.
	waitFor(t, ctx, "the lead's tokens while it runs", `(() => {
		const lead = document.querySelector("details.node");
		return lead.dataset.status === "running" && /\b[1-9]\d* in, [1-9]\d* out so far/.test(lead.querySelector(":scope > summary .meta").textContent);
	})()`)
	shot(t, ctx, "timeline-1-climbing")

	waitFor(t, ctx, "the question", `document.querySelector("form.question") !== null`)
	// A person takes a while to answer.
	time.Sleep(1500 * time.Millisecond)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`form.question button.approve`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the run to finish", `document.querySelector("details.node").dataset.status === "success"`)
	waitFor(t, ctx, "the timeline to be drawn whole", `[...document.querySelectorAll(".timeline .row")].every((r) => r.dataset.status === "success")`)
	shot(t, ctx, "timeline-2-finished")

	// A row per node, in the tree's order.
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]row](readRows))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rows {
		names = append(names, r.Name)
	}
	var inTree []string
	for _, n := range nodes(t, ctx) {
		inTree = append(inTree, n.Name)
	}
	if got, want := strings.Join(names, ","), strings.Join(inTree, ","); got != want || len(rows) != 5 {
		t.Fatalf("the timeline's rows are %s, want one per node of the tree, in its order: %s", got, want)
	}

	// Each bar where and as long as the recorded events say, on one axis.
	spans, queuedEvents := recordedSpans(t, srv, thread)
	t0, t1 := math.Inf(1), math.Inf(-1)
	for _, s := range spans {
		t0, t1 = math.Min(t0, s.start), math.Max(t1, s.end)
	}
	for _, r := range rows {
		s, ok := spans[r.Node]
		if !ok {
			t.Fatalf("row %+v names no node of the recorded run", r)
		}
		wantLeft, wantWidth := (s.start-t0)/(t1-t0)*r.Track, (s.end-s.start)/(t1-t0)*r.Track
		if math.Abs(r.Left-wantLeft) > 2 || math.Abs(r.Width-wantWidth) > 2 {
			t.Errorf("%s's bar is at %.1f px, %.1f px wide; its run (%.0f to %.0f ms of %.0f) puts it at %.1f px, %.1f px wide",
				r.Name, r.Left, r.Width, s.start-t0, s.end-t0, t1-t0, wantLeft, wantWidth)
		}
		// The wait for a person, apart: the editor's and the lead's.
		var waited float64
		for _, w := range r.Waiting {
			waited += w
		}
		if wantWait := s.waited / (t1 - t0) * r.Track; math.Abs(waited-wantWait) > 2 {
			t.Errorf("%s's wait for a person is drawn %.1f px wide, want %.1f px (%.0f ms)", r.Name, waited, wantWait, s.waited)
		}
		if (r.Name == "editor" || r.Name == "lead") && s.waited < 1500 {
			t.Errorf("%s waited %.0f ms for the person by the recorded events, want 1,500 or more", r.Name, s.waited)
		}
	}
	// Bars ordered as the nodes' times are.
	for _, a := range rows {
		for _, b := range rows {
			if sa, sb := spans[a.Node], spans[b.Node]; sa.end-sa.start < sb.end-sb.start-5 && a.Width > b.Width {
				t.Errorf("%s ran %.0f ms, less than %s's %.0f ms, and its bar is wider: %.1f px > %.1f px", a.Name, sa.end-sa.start, b.Name, sb.end-sb.start, a.Width, b.Width)
			}
		}
	}
	// Each time a call was queued for admission is drawn, and there was
	// one: three calls at once, two let through.
	queued := 0
	for _, r := range rows {
		queued += len(r.Queued)
	}
	if queuedEvents == 0 || queued != queuedEvents {
		t.Errorf("%d times queued for admission drawn, %d recorded; want them all, and at least one", queued, queuedEvents)
	}
	meta := map[string]string{}
	for _, n := range nodes(t, ctx) {
		meta[n.Name] = n.Meta
	}
	if !regexp.MustCompile(`\d\.\d\d s waiting for a person`).MatchString(meta["editor"]) {
		t.Errorf("the editor's figures %q do not show its wait for a person apart", meta["editor"])
	}

	// The editor folded in the tree folds its fact checker's row.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`[...document.querySelectorAll("details.node")].find((el) => el.querySelector(":scope > summary .name").textContent === "editor").open = false`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the fact checker's row to fold", `![...document.querySelectorAll(".timeline .row")].some((r) => r.dataset.name === "fact_checker") && document.querySelectorAll(".timeline .row").length === 4`)
	// Its row clicked selects the editor in the tree.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`.timeline .row[data-name="editor"]`))); err != nil {
		t.Fatal(err)
	}
	sel, err := chromedp.Run(ctx, chromedp.Evaluate[struct {
		Name    string
		Focused bool
		InView  bool
	}](`(() => {
		const el = document.querySelector("details.node.selected");
		if (!el) return {Name: "", Focused: false, InView: false};
		const box = el.getBoundingClientRect();
		return {Name: el.querySelector(":scope > summary .name").textContent, Focused: document.activeElement === el.querySelector(":scope > summary"),
			InView: box.top >= 0 && box.top < innerHeight};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if sel.Name != "editor" || !sel.Focused || !sel.InView {
		t.Errorf("after a click on the editor's row, the selected node is %+v; want the editor, focused and in view", sel)
	}
	shot(t, ctx, "timeline-3-selected")
}

// span is a node's time in a recorded run, in Unix milliseconds, and how
// much of it it waited for a person.
type span struct{ start, end, waited float64 }

// recordedSpans reads the thread's recorded runs and returns, per node
// (the lead's id is ""), when it started, ended and how long it waited for
// a person, by the events' timestamps; and how many times a call was
// queued for admission.
func recordedSpans(t *testing.T, srv *server, thread string) (map[string]span, int) {
	t.Helper()
	resp, err := http.Get(srv.url + "runs/" + url.PathEscape(thread))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	type run struct {
		Events []struct {
			Type          string
			Timestamp     float64
			SubagentRunID string
			Name          string
			Outcome       struct{ Type string }
			Value         json.RawMessage
		}
	}
	var got struct{ Runs []run }
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if len(got.Runs) != 2 {
		t.Fatalf("%d recorded runs, want 2: the run that asked, and the one that went on", len(got.Runs))
	}
	spans := map[string]span{}
	asked := map[string]float64{}
	queued := 0
	// From the oldest run to the newest.
	slices.SortFunc(got.Runs, func(a, b run) int { return cmp.Compare(a.Events[0].Timestamp, b.Events[0].Timestamp) })
	for _, r := range got.Runs {
		for _, e := range r.Events {
			id := e.SubagentRunID
			s := spans[id]
			switch e.Type {
			case "RUN_STARTED", "SUBAGENT_STARTED":
				if s.start == 0 {
					s.start = e.Timestamp
				}
				if at, ok := asked[id]; ok {
					s.waited += e.Timestamp - at
					delete(asked, id)
				}
			case "RUN_FINISHED", "SUBAGENT_FINISHED", "SUBAGENT_ERROR":
				s.end = e.Timestamp
				if e.Outcome.Type == "interrupt" || e.Outcome.Type == "suspended" {
					asked[id] = e.Timestamp
				}
			case "CUSTOM":
				if e.Name == "deputy.admission" && strings.Contains(string(e.Value), `"state":"queued"`) {
					queued++
				}
			}
			spans[id] = s
		}
	}
	for id, s := range spans {
		if s.start == 0 || s.end == 0 {
			t.Fatalf("node %q of the recorded run has no start or end: %+v", id, s)
		}
	}
	if len(spans) != 5 {
		t.Fatalf("the recorded run has %d nodes, want 5: %+v", len(spans), spans)
	}
	return spans, queued
}
