// Package browsertest drives the run-tree viewer (package devui) in a real
// browser: Debian's chromium, headless, through chromedp. It serves the
// viewer with examples/devui, built from this repository, and checks what
// a person sees. It is a module of its own, so that the browser driver is
// no dependency of deputy's.
//
// The tests skip unless DEPUTY_TEST_BROWSER is set (.ci/run sets it and
// installs chromium). Screenshots of each state are saved in the test's
// artifact directory (go test -artifacts).
package browsertest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// binary is examples/devui, built once.
var binary string

func TestMain(m *testing.M) {
	if os.Getenv("DEPUTY_TEST_BROWSER") == "" {
		fmt.Println("skipping the browser tests: set DEPUTY_TEST_BROWSER=1 to run them (they need chromium: apt-get install chromium)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "devui-bin")
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "devui")
	build := exec.Command("go", "build", "-o", binary, "./examples/devui")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Printf("building examples/devui: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is a running examples/devui.
type server struct {
	cmd *exec.Cmd
	url string
}

// serve starts examples/devui with args and returns the viewer's URL; the
// server stops with the test, or with stop.
func serve(t *testing.T, args ...string) *server {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd}
	t.Cleanup(s.stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the server's URL: %v", err)
	}
	_, url, ok := strings.Cut(strings.TrimSpace(line), ": ")
	if !ok {
		t.Fatalf("the server printed %q, not its URL", line)
	}
	s.url = url
	return s
}

func (s *server) stop() {
	if s.cmd.Process != nil && s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Signal(os.Interrupt)
		_ = s.cmd.Wait()
	}
}

// browser returns a headless chromium tab, closed with the test, started
// with flags besides the usual.
func browser(t *testing.T, flags ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed: apt-get install chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1400, 1000))
	opts = append(opts, flags...)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	ctx, cancelTime := context.WithTimeout(ctx, 5*time.Minute) // a loaded machine draws 1,000 opened children slowly
	t.Cleanup(cancelTime)
	return ctx
}

// maxShotHeight is the tallest page shot captures whole, well under
// Chromium's 16,384-pixel limit on one capture.
const maxShotHeight = 8000

// shot saves a screenshot of the page in the test's artifacts:
// the whole page, or only the window when the page is taller than Chromium
// can capture at once (the opened 1,000-child tree is tens of thousands of
// pixels, past its texture limit, and the capture then fails outright).
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	height, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollHeight`))
	if err != nil {
		t.Fatalf("screenshot %s: the page's height: %v", name, err)
	}
	capture, file := chromedp.FullScreenshot(80), name+".jpg"
	if height > maxShotHeight {
		capture, file = chromedp.CaptureScreenshot(), name+"-window.png"
	}
	png, err := chromedp.Run(ctx, capture)
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(t.ArtifactDir(), file), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// nodes is what the page shows of each node of its trees: name, status,
// figures, streamed text.
type node struct {
	Name, Status, Meta, Text string
}

const readNodes = `[...document.querySelectorAll("details.node")].map((el) => ({
	Name: el.querySelector(":scope > summary .name").textContent,
	Status: el.dataset.status,
	Meta: el.querySelector(":scope > summary .meta").textContent,
	Text: el.querySelector(":scope > .text").textContent,
}))`

func nodes(t *testing.T, ctx context.Context) []node {
	t.Helper()
	ns, err := chromedp.Run(ctx, chromedp.Evaluate[[]node](readNodes))
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// waitFor polls the page until js is true.
func waitFor(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			status, _ := chromedp.Run(ctx, chromedp.Text(chromedp.ID("status")))
			t.Fatalf("waiting for %s: not after 30s; the page says %q; nodes %+v", what, status, nodes(t, ctx))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func byName(ns []node) map[string][]node {
	m := map[string][]node{}
	for _, n := range ns {
		m[n.Name] = append(m[n.Name], n)
	}
	return m
}

// TestViewer runs the scripted tree from the page: the tree grows with
// every node's status, tokens and streamed text; the approval question is
// answered with its form and the run finishes; a researcher is re-run with
// an edited task, and nothing else runs again (counted: the models' calls,
// the publish tool's runs); after a restart the stored thread is reopened
// and its trees redrawn from what was recorded.
func TestViewer(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "devui.db")
	srv := serve(t, "-store", db)
	ctx := browser(t)

	if err := chromedp.Do(ctx, chromedp.Navigate(srv.url), chromedp.WaitVisible(chromedp.ID("run"))); err != nil {
		t.Fatal(err)
	}
	checkAccessible(t, ctx)
	thread, err := chromedp.Run(ctx, chromedp.Value(chromedp.ID("thread")))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("run"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the question", `document.querySelector("form.question") !== null`)
	shot(t, ctx, "1-suspended")

	got := byName(nodes(t, ctx))
	if len(got["lead"]) != 1 || got["lead"][0].Status != "suspended" {
		t.Errorf("lead %+v, want one, suspended", got["lead"])
	}
	if len(got["researcher"]) != 2 {
		t.Fatalf("researchers %+v, want two", got["researcher"])
	}
	for _, r := range got["researcher"] {
		if r.Status != "success" || !strings.Contains(r.Meta, " in, ") || strings.Contains(r.Meta, " 0 in,") || !strings.Contains(r.Meta, "demo-model") {
			t.Errorf("researcher %+v: want success, with its tokens and model", r)
		}
	}
	if texts := got["researcher"][0].Text + got["researcher"][1].Text; !strings.Contains(texts, "About 90 million euros") || !strings.Contains(texts, "About 18,000 riders a day") {
		t.Errorf("the researchers' streamed text %q lacks their answers", texts)
	}
	if len(got["editor"]) != 1 || got["editor"][0].Status != "suspended" {
		t.Errorf("editor %+v, want suspended: its publish call waits for approval", got["editor"])
	}
	if len(got["fact_checker"]) != 1 || got["fact_checker"][0].Status != "success" {
		t.Errorf("fact checker %+v, want one, under the editor, succeeded", got["fact_checker"])
	}
	under, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`[...document.querySelectorAll("details.node")].some((el) =>
		el.querySelector(":scope > summary .name").textContent === "editor" &&
		el.querySelector(":scope > form.question, :scope > .questions > form.question") !== null &&
		[...el.querySelectorAll(":scope > .children > details.node .name")].some((n) => n.textContent === "fact_checker"))`))
	if err != nil {
		t.Fatal(err)
	}
	if !under {
		t.Error("the question is not shown at the editor, or the fact checker not under it")
	}

	// An approval is answered with a button, Approve or Decline (its
	// note is a text box), not a checkbox to tick.
	buttons, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("form.question button, form.question input")].map((el) => el.tagName === "BUTTON" ? el.textContent : el.type)`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(buttons, ",") != "text,Approve,Decline" {
		t.Errorf("the approval's form has %q, want a text box for the note and the buttons Approve and Decline", buttons)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`form.question button.approve`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the run to finish", `document.querySelector("details.node").dataset.status === "success"`)
	// The stored threads are listed again once a run ends, the new one
	// among them.
	waitFor(t, ctx, "the thread in the list", `[...document.querySelectorAll("#threads li")].some((li) => li.textContent.includes(`+strconv.Quote(thread)+`))`)
	shot(t, ctx, "2-finished")
	got = byName(nodes(t, ctx))
	if e := got["editor"]; len(e) != 1 || e[0].Status != "success" {
		t.Errorf("editor after the answer: %+v, want one node, success, under the same id", e)
	}
	checkAnswered(t, ctx, 1)
	// Each node's figures are what its models, and its sub-agents' models,
	// billed: the editor's spend before the approval and the lead's before
	// the resume included, once.
	bill := billed(t, srv)
	checkFigures(t, ctx, bill)

	// Re-run from the first researcher with its task edited: only it and
	// the lead's next step run again.
	before := counts(t, srv)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[aria-label="Re-run researcher from here"]`))); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(`form.rerun-form textarea`), "How much would a 2 km extension cost?"),
		chromedp.Click(chromedp.CSS(`form.rerun-form button[type=submit]`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the re-run to finish", `[...document.querySelectorAll(".run")].some((r) =>
		r.querySelector("h3").textContent.startsWith("re-run of researcher") && r.querySelector("details.node").dataset.status === "success")`)
	shot(t, ctx, "3-rerun")
	after := counts(t, srv)
	want := map[string]int64{"lead": 1, "researcher": 1, "editor": 0, "fact_checker": 0, "publish": 0}
	for k, d := range want {
		if after[k]-before[k] != d {
			t.Errorf("the re-run called %s %d more times, want %d (counts before %v, after %v)", k, after[k]-before[k], d, before, after)
		}
	}
	forked, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll(".run")].find((r) => r.querySelector("h3").textContent.startsWith("re-run of researcher")).innerText`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(forked, "researcher") || strings.Contains(forked, "fact_checker") {
		t.Errorf("the re-run's tree should hold the re-run researcher alone under the lead:\n%s", forked)
	}

	// Re-run the fact checker, the editor's own sub-agent, with its claim
	// edited: it runs anew, the editor goes on from its call to it and, its
	// next step depending on the check, asks again before it publishes;
	// nothing publishes, and no researcher or lead model runs again.
	before = counts(t, srv)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[aria-label="Re-run fact_checker from here"]`))); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(`form.rerun-form textarea`), "Is 120 million euros plausible for 4 km of tram?"),
		chromedp.Click(chromedp.CSS(`form.rerun-form button[type=submit]`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the grandchild's re-run to stop at the question", `[...document.querySelectorAll(".run")].some((r) =>
		r.querySelector("h3").textContent.startsWith("re-run of fact_checker") && r.querySelector("details.node").dataset.status === "suspended" &&
		r.querySelector("p.asked-again") !== null)`)
	shot(t, ctx, "3b-rerun-grandchild")
	after = counts(t, srv)
	want = map[string]int64{"lead": 0, "researcher": 0, "editor": 1, "fact_checker": 1, "publish": 0}
	for k, d := range want {
		if after[k]-before[k] != d {
			t.Errorf("the grandchild's re-run called %s %d more times, want %d (counts before %v, after %v)", k, after[k]-before[k], d, before, after)
		}
	}
	forked, err = chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll(".run")].find((r) => r.querySelector("h3").textContent.startsWith("re-run of fact_checker")).innerText`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(forked, "editor") || !strings.Contains(forked, "fact_checker") || strings.Contains(forked, "researcher") {
		t.Errorf("the grandchild's re-run should hold the editor going on, with the new fact check under it:\n%s", forked)
	}

	// A restart: the stored thread is listed and its tree redrawn.
	srv.stop()
	srv = serve(t, "-store", db)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.url), chromedp.WaitVisible(chromedp.ID("refresh"))); err != nil {
		t.Fatal(err)
	}
	open := fmt.Sprintf(`button[aria-label="Open thread %s"]`, thread)
	waitFor(t, ctx, "the stored thread", fmt.Sprintf(`document.querySelector(%q) !== null`, open))
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(open))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the stored trees", `document.querySelectorAll(".run").length >= 3`)
	shot(t, ctx, "4-reopened")
	// The approval is drawn answered, as it was answered: no form is left
	// to answer it again on the editor that went on.
	checkAnswered(t, ctx, 1)
	// The first run's figures are redrawn from the store as they were
	// billed.
	checkFigures(t, ctx, bill)
	statuses := map[string]string{}
	for _, n := range nodes(t, ctx) {
		statuses[n.Name] += n.Status + " "
	}
	for name, want := range map[string][]string{
		"lead":         {"success", "success", "suspended"}, // the run, the researcher's re-run, the fact check's
		"researcher":   {"success", "success", "success"},
		"editor":       {"success", "suspended"},
		"fact_checker": {"success", "success"},
	} {
		got := strings.Fields(statuses[name])
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("the reopened trees' %s nodes are %v, want %v (the finished run and its two re-runs)", name, got, want)
		}
	}
}

// TestThreadFromItsConversation reopens a thread whose runs were served at
// the AG-UI endpoint directly, so that the viewer recorded none of them:
// its tree is drawn from the stored conversation, a node per call of the
// lead with its result.
func TestThreadFromItsConversation(t *testing.T) {
	srv := serve(t)
	base := strings.TrimSuffix(srv.url, "devui/")
	events := postRun(t, base+"agui", `{"threadId":"direct","runId":"r1","messages":[{"id":"m1","role":"user","content":"go"}]}`)
	i := strings.Index(events, `"interrupts":[{"id":"`)
	if i < 0 {
		t.Fatalf("the run did not ask for approval:\n%.2000s", events)
	}
	id := events[i+len(`"interrupts":[{"id":"`):]
	id = id[:strings.IndexByte(id, '"')]
	postRun(t, base+"agui", `{"threadId":"direct","runId":"r2","messages":[],"resume":[{"interruptId":"`+id+`","status":"resolved","payload":{"approved":true}}]}`)

	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.url), chromedp.WaitVisible(chromedp.ID("refresh"))); err != nil {
		t.Fatal(err)
	}
	open := `button[aria-label="Open thread direct"]`
	waitFor(t, ctx, "the thread", fmt.Sprintf(`document.querySelector(%q) !== null`, open))
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(open))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the tree", `document.querySelectorAll("details.node").length >= 4`)
	shot(t, ctx, "from-conversation")
	got := byName(nodes(t, ctx))
	if len(got["researcher"]) != 2 || len(got["editor"]) != 1 || got["editor"][0].Status != "success" || !strings.Contains(got["editor"][0].Text, "published") {
		t.Errorf("the tree drawn from the conversation: %+v", got)
	}
}

// answeredQuestion is what the page shows of a question answered.
type answeredQuestion struct {
	Node, Status, Question, Answer string
}

// checkAnswered checks that the page shows n answered questions, each at
// the editor, which finished, with the approval, when it was given, and no
// form left to answer it with.
func checkAnswered(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]answeredQuestion](`[...document.querySelectorAll(".answered")].map((el) => {
		const node = el.closest("details.node");
		return {
			Node: node.querySelector(":scope > summary .name").textContent,
			Status: node.dataset.status,
			Question: el.querySelector("p").textContent,
			Answer: el.querySelector(".answer").textContent,
		};
	})`))
	if err != nil {
		t.Fatal(err)
	}
	forms, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("form.question:not(.rerun-form)").length`))
	if err != nil {
		t.Fatal(err)
	}
	if forms != 0 {
		t.Errorf("%d question forms are still on the page, want none: every question was answered", forms)
	}
	if len(got) != n {
		t.Fatalf("answered questions on the page: %+v, want %d", got, n)
	}
	stamp := regexp.MustCompile(`^Approved at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: \{"approved":true\}$`)
	for _, a := range got {
		if a.Node != "editor" || a.Status != "success" || !strings.HasPrefix(a.Question, "Publish the write-up?") || !stamp.MatchString(a.Answer) {
			t.Errorf("answered question %+v: want the editor's publish question, approved, with when", a)
		}
	}
}

// postRun posts a run to the AG-UI endpoint and returns its events' text.
func postRun(t *testing.T, url, body string) string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a run: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// counts reads what the example's scripted models and publish tool did.
func counts(t *testing.T, srv *server) map[string]int64 {
	t.Helper()
	resp, err := http.Get(strings.TrimSuffix(srv.url, "devui/") + "debug/counts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c map[string]int64
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	return c
}

// tokens is what a model billed, as examples/devui's /debug/billed reports
// it.
type tokens struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// billed is what each of the small tree's models billed, by agent.
func billed(t *testing.T, srv *server) map[string]tokens {
	t.Helper()
	resp, err := http.Get(strings.TrimSuffix(srv.url, "devui/") + "debug/billed")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b map[string]tokens
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		t.Fatal(err)
	}
	if len(b) != 4 {
		t.Fatalf("the models billed %+v, want the four of the small tree", b)
	}
	return b
}

// readRunFigures is the tokens each node of the viewer's first run (not a
// re-run) shows, by name, in the order drawn.
const readRunFigures = `(() => {
	const run = [...document.querySelectorAll(".run")].find((r) => !r.querySelector("h3").textContent.startsWith("re-run"));
	return [...run.querySelectorAll("details.node")].map((el) => {
		const m = /(\d+) in, (\d+) out/.exec(el.querySelector(":scope > summary .meta").textContent);
		return { Name: el.querySelector(":scope > summary .name").textContent, In: m ? +m[1] : -1, Out: m ? +m[2] : -1 };
	});
})()`

// checkFigures checks that each node of the first run shows what its own
// model and its sub-agents' models billed: the lead the whole tree, the
// editor its fact checker too, the two researchers together theirs.
func checkFigures(t *testing.T, ctx context.Context, bill map[string]tokens) {
	t.Helper()
	type figures struct {
		Name    string
		In, Out int64
	}
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[[]figures](readRunFigures))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]tokens{}
	for _, f := range shown {
		u := got[f.Name]
		u.InputTokens += f.In
		u.OutputTokens += f.Out
		got[f.Name] = u
	}
	sum := func(names ...string) tokens {
		var u tokens
		for _, n := range names {
			u.InputTokens += bill[n].InputTokens
			u.OutputTokens += bill[n].OutputTokens
		}
		return u
	}
	want := map[string]tokens{
		"lead":         sum("lead", "researcher", "editor", "fact_checker"),
		"researcher":   sum("researcher"),
		"editor":       sum("editor", "fact_checker"),
		"fact_checker": sum("fact_checker"),
	}
	if len(shown) != 5 || !maps.Equal(got, want) {
		t.Errorf("the first run's nodes show %+v, want by name %+v, what the models billed (%+v)", shown, want, bill)
	}
}

// checkAccessible checks that every control has a label or a name, and
// that none is kept out of the keyboard's reach.
func checkAccessible(t *testing.T, ctx context.Context) {
	t.Helper()
	js := `[...document.querySelectorAll("input, select, textarea, button, [tabindex]")].flatMap((el) => {
		const out = [];
		if (el.tabIndex < 0) out.push(el.outerHTML.slice(0, 80) + " is out of the keyboard's reach");
		if (el.tagName === "BUTTON") {
			if (!(el.textContent.trim() || el.getAttribute("aria-label"))) out.push(el.outerHTML.slice(0, 80) + " has no name");
		} else if (el.labels && el.labels.length === 0 && !el.getAttribute("aria-label")) {
			out.push(el.outerHTML.slice(0, 80) + " has no label");
		}
		return out;
	})`
	problems, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](js))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestWideFanout draws a fan-out of 1,000 children and reports how long
// the page took from the first event to the first node, and to the whole
// tree, as the browser measured them.
func TestWideFanout(t *testing.T) {
	srv := serve(t, "-children", "1000")
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.url), chromedp.WaitVisible(chromedp.ID("run")), chromedp.Click(chromedp.ID("run"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the whole tree", `performance.getEntriesByName("deputy:tree-drawn").length > 0`)
	times, err := chromedp.Run(ctx, chromedp.Evaluate[struct{ FirstNode, Whole float64 }](`(() => {
		const at = (n) => performance.getEntriesByName(n)[0].startTime;
		return {FirstNode: at("deputy:first-node") - at("deputy:first-event"), Whole: at("deputy:tree-drawn") - at("deputy:first-event")};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	ns := nodes(t, ctx)
	done := 0
	for _, n := range ns {
		if n.Name == "worker" && n.Status == "success" {
			done++
		}
	}
	shot(t, ctx, "wide")
	// The workers are one folded group under the lead, whose line counts
	// them by status, and the page is short: the group is in view without
	// scrolling past the lead, whose 1,000 calls are folded after the first.
	page, err := chromedp.Run(ctx, chromedp.Evaluate[struct {
		Height, GroupTop, View float64
		Line                   string
		Calls                  int
	}](`(() => {
		const g = document.querySelector("details.group");
		return {Height: document.documentElement.scrollHeight, GroupTop: g ? g.getBoundingClientRect().top + scrollY : -1, View: innerHeight,
			Line: g ? g.querySelector(".group-line").textContent : "", Calls: document.querySelectorAll("details.node > .tools > li:not(.more)").length};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("1,000 children: first node drawn %.1f ms after the first event; the whole tree %.1f ms after it; page %.0f px high, the group at %.0f px (window %.0f px)", times.FirstNode, times.Whole, page.Height, page.GroupTop, page.View)
	if done != 1000 {
		t.Errorf("%d workers drawn as succeeded, want 1000", done)
	}
	if page.Line != "worker ×1000: 1000 success" {
		t.Errorf("the group's line is %q, want %q", page.Line, "worker ×1000: 1000 success")
	}
	if page.GroupTop < 0 || page.GroupTop > page.View {
		t.Errorf("the workers' group is at %.0f px, below the first screen (%.0f px)", page.GroupTop, page.View)
	}
	if page.Calls > 40 {
		t.Errorf("%d calls listed before any is asked for, want the lead's first few", page.Calls)
	}
	// The timeline beside the tree folds the workers as the tree does: the
	// lead's row and the group's.
	const rowLabels = `[...document.querySelectorAll(".timeline .row .label")].map((el) => el.textContent)`
	labels, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](rowLabels))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(labels, "|") != "lead|worker ×1000: 1000 success" {
		t.Errorf("the timeline's rows are %q, want the lead's and the folded group's", labels)
	}
	// Opened, the group shows each worker's task in its header, in the
	// order of the lead's calls; sorted by state, and back.
	tasks, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`document.querySelector("details.group").open = true;
		[...document.querySelectorAll("details.group > .children > details.node > summary .task")].map((el) => el.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 1000 {
		t.Fatalf("%d workers in the opened group, want 1000", len(tasks))
	}
	for i, task := range tasks {
		if want := fmt.Sprintf("part %d", i); task != want {
			t.Fatalf("worker %d of the group has the task %q, want %q: the workers in the order of the calls", i, task, want)
		}
	}
	// The timeline opens the group with the tree: a row per worker, in
	// the order of the calls.
	waitFor(t, ctx, "the workers' rows", `document.querySelectorAll(".timeline .row").length === 1002`)
	labels, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](rowLabels))
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range labels[2:] {
		if want := fmt.Sprintf("worker: part %d", i); l != want {
			t.Fatalf("row %d of the opened group is %q, want %q", i, l, want)
		}
	}
	shot(t, ctx, "wide-open")
	// The filter leaves only what matches, and the nodes above it.
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("search"), "part 999")); err != nil {
		t.Fatal(err)
	}
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.getElementById("search").dispatchEvent(new Event("input")); [...document.querySelectorAll("details.node")].filter((el) => !el.hidden).length`))
	if err != nil {
		t.Fatal(err)
	}
	if shown != 2 {
		t.Errorf("searching for one worker's text shows %d nodes, want 2: it and the lead", shown)
	}
	// The timeline too: the lead, the group and that worker.
	waitFor(t, ctx, "the timeline to follow the search", `[...document.querySelectorAll(".timeline .row .label")].map((el) => el.textContent).join("|") === "lead|worker ×1000: 1000 success|worker: part 999"`)
}
