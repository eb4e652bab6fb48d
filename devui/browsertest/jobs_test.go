package browsertest

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/chromedp/chromedp"
)

// job is what the page shows of a background child: its node, its job
// line and its mailbox, a line per message with its receipt.
type job struct {
	Name, Status, Task, Job string
	Mail                    []struct{ Text, Receipt, State string }
}

const readJobs = `[...document.querySelectorAll("details.node")].filter((el) => !el.querySelector(":scope > .job").hidden).map((el) => ({
	Name: el.querySelector(":scope > summary .name").textContent,
	Status: el.dataset.status,
	Task: el.querySelector(":scope > summary .task").textContent,
	Job: el.querySelector(":scope > .job").textContent,
	Mail: [...el.querySelectorAll(":scope > .mailbox > li")].map((li) => ({
		Text: li.querySelector(".message").textContent,
		Receipt: li.querySelector(".receipt").textContent,
		State: li.dataset.state,
	})),
}))`

// TestBackgroundJobsAndTheirMailboxes runs a lead that starts two
// surveys in the background and sends each a message while it works: the
// tree shows both as background jobs, each with its mailbox — the message
// sent, delivered before the step it reached — live, and again after a
// restart, redrawn from the store. A picture of a mailbox is taken and
// checked to show something.
func TestBackgroundJobsAndTheirMailboxes(t *testing.T) {
	db := filepath.Join(t.TempDir(), "devui.db")
	srv := serve(t, "-background", "-store", db)
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
	finished := `document.querySelector("details.node") !== null && document.querySelector("details.node").dataset.status === "success" && document.querySelectorAll(".mailbox > li[data-state=delivered]").length === 2`
	waitFor(t, ctx, "the run and both deliveries", finished)
	checkAccessible(t, ctx)
	shot(t, ctx, "jobs-live")
	checkJobs(t, ctx, "live")
	checkPicture(t, ctx, "mailbox-live")

	srv.stop()
	srv = serve(t, "-background", "-store", db)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.url), chromedp.WaitVisible(chromedp.ID("refresh"))); err != nil {
		t.Fatal(err)
	}
	open := fmt.Sprintf(`button[aria-label="Open thread %s"]`, thread)
	waitFor(t, ctx, "the stored thread", fmt.Sprintf(`document.querySelector(%q) !== null`, open))
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(open))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the stored tree", finished)
	shot(t, ctx, "jobs-reopened")
	checkJobs(t, ctx, "after a restart")
	checkPicture(t, ctx, "mailbox-reopened")
}

// checkJobs checks the two surveys the page shows.
func checkJobs(t *testing.T, ctx context.Context, when string) {
	t.Helper()
	jobs, err := chromedp.Run(ctx, chromedp.Evaluate[[]job](readJobs))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 {
		t.Fatalf("%s: %d background jobs drawn, want 2: %+v", when, len(jobs), jobs)
	}
	want := map[string]string{"Survey the north bank.": "Count the bridges too.", "Survey the south bank.": "Note the ferry stops."}
	line := regexp.MustCompile(`^background job job_[0-9a-z]+ · done$`)
	step := regexp.MustCompile(`^delivered before step [1-9][0-9]*$`)
	for _, j := range jobs {
		msg, ok := want[j.Task]
		delete(want, j.Task)
		if !ok || j.Status != "success" || !line.MatchString(j.Job) {
			t.Errorf("%s: job %+v: want a finished survey of a bank, its job done", when, j)
			continue
		}
		if len(j.Mail) != 1 || j.Mail[0].Text != msg || j.Mail[0].State != "delivered" || !step.MatchString(j.Mail[0].Receipt) {
			t.Errorf("%s: %s's mailbox %+v: want %q, delivered before a step", when, j.Task, j.Mail, msg)
		}
	}
}

// checkPicture takes a picture of the first mailbox, saves it, and checks
// that it shows something: more than one colour, some of them dark (the
// text), some of them the receipt's green.
func checkPicture(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	b, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(".mailbox:not([hidden])")))
	if err != nil {
		t.Fatalf("a picture of the mailbox: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(t.ArtifactDir(), name+".png"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	dark, green := 0, 0
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			cr, cg, cb = cr>>8, cg>>8, cb>>8
			if cr+cg+cb < 200 {
				dark++
			}
			if cg > 230 && cr < 230 && cr > 200 && cb > 215 { // #dafbe1, the delivered receipt
				green++
			}
		}
	}
	if r.Dx() < 50 || r.Dy() < 10 || dark == 0 || green == 0 {
		t.Errorf("the mailbox's picture (%v) has %d dark and %d green pixels: want its text on the page and its receipt drawn delivered", r, dark, green)
	}
}
