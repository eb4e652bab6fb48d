package browsertest

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestOtherSitesAreRefused attacks the viewer, and the AG-UI handler
// served beside it, from pages of another origin, as the developer's
// browser would load them while the viewer runs: a plain HTML form
// (enctype text/plain: no script, no preflight) that re-runs a recorded
// call of the developer's thread or starts a run, a no-cors fetch and
// beacons that start runs, fetches that delete the developer's thread,
// and a page whose name was rebound to the viewer's address (DNS
// rebinding), which reads the threads, the recorded runs, and starts runs
// as a page of that name. Each is refused: no model and no tool runs, no
// thread is made or deleted, nothing is read; and the viewer's own page
// still runs and reopens the thread.
func TestOtherSitesAreRefused(t *testing.T) {
	srv := serve(t)
	base := strings.TrimSuffix(srv.url, "devui/")
	port := base[strings.LastIndexByte(strings.TrimSuffix(base, "/"), ':')+1 : len(base)-1]

	// The developer's thread, run from the viewer and approved.
	events := postRun(t, base+"devui/run", `{"threadId":"victim","runId":"v1","messages":[{"id":"m1","role":"user","content":"go"}]}`)
	i := strings.Index(events, `"interrupts":[{"id":"`)
	if i < 0 {
		t.Fatalf("the run did not ask for approval:\n%.2000s", events)
	}
	id := events[i+len(`"interrupts":[{"id":"`):]
	id = id[:strings.IndexByte(id, '"')]
	postRun(t, base+"devui/run", `{"threadId":"victim","runId":"v2","messages":[],"resume":[{"interruptId":"`+id+`","status":"resolved","payload":{"approved":true}}]}`)
	call := firstCall(t, base+"devui/threads/victim")
	recorded := len(recordedRuns(t, base+"devui/runs/victim"))

	// The other site: evil.test, which the browser resolves to loopback.
	rerun := `{"threadId":"victim","runId":"evil-form","fromRunId":"v1","step":1,"toolCallId":"` + call + `","task":"Spend it all.","x":"`
	run := func(thread string) string {
		return `{"threadId":"` + thread + `","runId":"r","messages":[{"id":"m1","role":"user","content":"go"}]}`
	}
	form := func(action, name string) string {
		return `<!doctype html><title>a prize</title><form method="post" enctype="text/plain" action="` + base + action + `">` +
			`<input type="hidden" name="` + html.EscapeString(name) + `" value='"}'><button type="submit">Claim</button></form>`
	}
	fetch := func(action, thread string) string {
		return `<!doctype html><script>
			fetch(` + jsString(base+action) + `, {method: "POST", mode: "no-cors", credentials: "include", body: new Blob([` + jsString(run(thread)) + `])})
				.then(() => { window.sent = true; }, () => { window.sent = true; });
			</script>`
	}
	beacon := func(action, thread string) string {
		return `<!doctype html><script>
			window.sent = navigator.sendBeacon(` + jsString(base+action) + `, new Blob([` + jsString(run(thread)) + `])) &&
				navigator.sendBeacon(` + jsString(base+action) + `, ` + jsString(run(thread+"-text")) + `);
			</script>`
	}
	// The viewer's routes, and the AG-UI handler the example serves beside
	// it at /agui, which guards itself the same way.
	pages := map[string]string{
		"/form-rerun":    form("devui/rerun", rerun),
		"/form-run":      form("devui/run", strings.TrimSuffix(run("evil-form-run"), "}")+`,"x":"`),
		"/fetch":         fetch("devui/run", "evil-fetch"),
		"/beacon":        beacon("devui/run", "evil-beacon"),
		"/agui-form-run": form("agui", strings.TrimSuffix(run("evil-agui-form"), "}")+`,"x":"`),
		"/agui-fetch":    fetch("agui", "evil-agui-fetch"),
		"/agui-beacon":   beacon("agui", "evil-agui-beacon"),
		"/agui-delete":   deleteThread(base + "threads/victim"),
		"/devui-delete":  deleteThread(base + "devui/threads/victim"),
	}
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page, ok := pages[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, page)
	}))
	defer evil.Close()
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "evil.test", 1)

	ctx := browser(t, chromedp.Flag("host-resolver-rules", "MAP evil.test 127.0.0.1, MAP rebind.test 127.0.0.1"))
	before := counts(t, srv)
	unchanged := func(what string) {
		t.Helper()
		// What a request that got through would do shows within a second.
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if now := counts(t, srv); !maps.Equal(now, before) {
				t.Errorf("%s ran something: the models and tools ran %v, before %v", what, now, before)
				before = now
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		for _, th := range []string{"evil-form-run", "evil-fetch", "evil-beacon", "evil-beacon-text",
			"evil-agui-form", "evil-agui-fetch", "evil-agui-beacon", "evil-agui-beacon-text"} {
			if resp, err := http.Get(base + "devui/threads/" + th); err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Errorf("%s: thread %s is there (%d)", what, th, resp.StatusCode)
				}
			}
		}
		if n := len(recordedRuns(t, base+"devui/runs/victim")); n != recorded {
			t.Errorf("%s recorded %d more runs of the developer's thread", what, n-recorded)
			recorded = n
		}
	}

	for _, p := range []string{"/form-rerun", "/form-run", "/agui-form-run"} {
		if err := chromedp.Do(ctx, chromedp.Navigate(evilURL+p), chromedp.Click(chromedp.CSS("button[type=submit]"))); err != nil {
			t.Fatal(err)
		}
		// The form's post navigates the tab to the viewer's answer.
		waitFor(t, ctx, "the answer to the form", `location.host !== `+jsString(strings.TrimPrefix(evilURL, "http://")))
		answer, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(answer, "another site") {
			t.Errorf("the form %s was answered %.300q, want a refusal naming another site", p, answer)
		}
		shot(t, ctx, "attack"+strings.ReplaceAll(p, "/", "-"))
		unchanged("the form " + p)
	}
	for _, p := range []string{"/fetch", "/beacon", "/agui-fetch", "/agui-beacon", "/agui-delete", "/devui-delete"} {
		if err := chromedp.Do(ctx, chromedp.Navigate(evilURL+p)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the page's request", `window.sent === true`)
		unchanged("the page " + p)
	}
	resp, err := http.Get(base + "threads/victim")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the developer's thread after the cross-site deletes: %s, want it still there", resp.Status)
	}

	// DNS rebinding: a page of rebind.test, the name now resolving to the
	// viewer's address, asks as a page of that origin.
	rebound := "http://rebind.test:" + port
	if err := chromedp.Do(ctx, chromedp.Navigate(rebound+"/devui/")); err != nil {
		t.Fatal(err)
	}
	shot(t, ctx, "attack-rebound")
	statuses, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]int](`(async () => {
		const out = {};
		const json = {"Content-Type": "application/json"};
		const run = JSON.stringify({threadId: "evil-rebound", runId: "r", messages: [{id: "m1", role: "user", content: "go"}]});
		for (const [name, url, init] of [
			["page", "/devui/", {}],
			["threads", "/devui/threads/", {}],
			["thread", "/devui/threads/victim", {}],
			["runs", "/devui/runs/victim", {}],
			["run", "/devui/run", {method: "POST", headers: json, body: run}],
			["rerun", "/devui/rerun", {method: "POST", headers: json, body: `+jsString(rerun+`"}`)+`}],
			["agui run", "/agui", {method: "POST", headers: json, body: run}],
			["agui threads", "/threads/", {}],
		]) {
			out[name] = (await fetch(url, init)).status;
		}
		return out;
	})()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	for name, status := range statuses {
		if status != http.StatusMisdirectedRequest {
			t.Errorf("the rebound page's %s: %d, want 421", name, status)
		}
	}
	if len(statuses) != 8 {
		t.Errorf("the rebound page's requests: %v", statuses)
	}
	unchanged("the rebound page")

	// The viewer's own page, at its address and at localhost, still runs
	// and reopens the developer's thread.
	for _, at := range []string{srv.url, "http://localhost:" + port + "/devui/"} {
		if err := chromedp.Do(ctx, chromedp.Navigate(at), chromedp.WaitVisible(chromedp.ID("run")), chromedp.Click(chromedp.ID("run"))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the question at "+at, `document.querySelector("form.question") !== null`)
		open := `button[aria-label="Open thread victim"]`
		waitFor(t, ctx, "the developer's thread", fmt.Sprintf(`document.querySelector(%q) !== null`, open))
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(open))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "its recorded runs", `[...document.querySelectorAll(".run h3")].some((h) => h.textContent.includes("victim (stored)"))`)
	}
	shot(t, ctx, "own-page")
	if after := counts(t, srv); after["lead"] <= before["lead"] {
		t.Errorf("the viewer's own page ran nothing: counts %v, before %v", after, before)
	}
}

// deleteThread is a page that deletes a thread with a fetch of its own
// origin's: a DELETE goes out only if the server answers a preflight.
func deleteThread(url string) string {
	return `<!doctype html><script>
		fetch(` + jsString(url) + `, {method: "DELETE", credentials: "include"})
			.then(() => { window.sent = true; }, () => { window.sent = true; });
		</script>`
}

// firstCall returns the id of the lead's first call in a stored thread.
func firstCall(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var th struct {
		Messages []struct {
			ToolCalls []struct{ ID string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&th); err != nil {
		t.Fatal(err)
	}
	for _, m := range th.Messages {
		if len(m.ToolCalls) > 0 {
			return m.ToolCalls[0].ID
		}
	}
	t.Fatalf("the thread has no call: %+v", th)
	return ""
}

// recordedRuns returns the ids of a thread's newest recorded runs.
func recordedRuns(t *testing.T, url string) []string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct{ Runs []struct{ RunID string } }
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(p.Runs))
	for i, r := range p.Runs {
		ids[i] = r.RunID
	}
	return ids
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
