package browsertest

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestCassette serves the viewer with the cassette of the quickstart's
// tour (devui.WithCassette): its button draws the recorded run, each
// place in its tree a node with what its model answered.
func TestCassette(t *testing.T) {
	path, err := filepath.Abs("../../examples/quickstart/testdata/tour.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, "-cassette", path)
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.url), chromedp.WaitVisible(chromedp.ID("refresh"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the cassette's button", `document.getElementById("cassette") !== null`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("cassette"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the recorded tree", `document.querySelectorAll("details.node").length >= 5`)
	ns := nodes(t, ctx)
	count := map[string]int{}
	var text strings.Builder
	for _, n := range ns {
		count[n.Name]++
		text.WriteString(n.Text + "\n")
	}
	// The lead, the resident expert twice, the reviewer and the delegate
	// the lead wrote: one node each place of the cassette.
	for name, want := range map[string]int{"expert": 2, "reviewer": 1, "delegate": 1} {
		if count[name] != want {
			t.Errorf("%d nodes named %s, want %d; the nodes: %+v", count[name], name, want, ns)
		}
	}
	for _, said := range []string{"Building on my last answer", "tools vanish"} {
		if !strings.Contains(text.String(), said) {
			t.Errorf("no node shows %q, which the cassette recorded; the nodes: %+v", said, ns)
		}
	}
	status, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("status")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status, "recorded cassette") {
		t.Errorf("the page says %q, not that it drew the recorded cassette", status)
	}
	shot(t, ctx, "cassette")
}
