package browsertest

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestOlderRunsOnDemand reopens a thread of more recorded runs than a
// page holds: the newest are drawn, the newest on top, and "Show older
// runs" draws the rest below them.
func TestOlderRunsOnDemand(t *testing.T) {
	srv := serve(t, "-children", "1")
	const n = 23
	for i := 1; i <= n; i++ {
		postRun(t, srv.url+"run", fmt.Sprintf(`{"threadId":"many","runId":"r%d","messages":[{"id":"m%d","role":"user","content":"go"}]}`, i, i))
	}
	ctx := browser(t)
	open := `button[aria-label="Open thread many"]`
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.url), chromedp.WaitVisible(chromedp.ID("refresh"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the thread", fmt.Sprintf(`document.querySelector(%q) !== null`, open))
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(open))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the newest runs", `document.querySelectorAll(".run").length === 20 && document.getElementById("older") !== null`)
	// Each tree names its run in its lead's events: the first on the page
	// is the newest.
	top, err := chromedp.Run(ctx, chromedp.Evaluate[string](`trees[19].runId`))
	if err != nil {
		t.Fatal(err)
	}
	if top != fmt.Sprintf("r%d", n) {
		t.Errorf("the newest tree drawn is %q, want r%d", top, n)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("older"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the older runs", fmt.Sprintf(`document.querySelectorAll(".run").length === %d && document.getElementById("older") === null`, n))
	order, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll(".run")].map((el) => trees.find((t) => t.el === el).runId)`))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range order {
		if id != fmt.Sprintf("r%d", n-i) {
			t.Fatalf("the trees from the top: %q, want r%d down to r1", order, n)
		}
	}
	shot(t, ctx, "older-runs")
}
