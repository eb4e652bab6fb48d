package devui_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/devui"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
)

// send sends a request as a browser would, with a Host and headers, and
// returns its status and body.
func send(t *testing.T, method, url, host, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The viewer answers only its own page. A page of another site, by a form
// (text/plain, no preflight), a no-cors fetch or a beacon, re-runs no
// recorded call and starts no run; a page that rebound its own name to the
// viewer's address reads nothing and runs nothing. The viewer's own page
// is served, and its re-run runs. Counted: the models' calls and the
// helper's runs, with each way a model names its calls.
func TestOnlyItsOwnPage(t *testing.T) {
	for _, ids := range []string{"fixed", "fresh", "none", "restart"} {
		t.Run(ids, func(t *testing.T) { testOnlyItsOwnPage(t, ids) })
	}
}

func testOnlyItsOwnPage(t *testing.T, ids string) {
	srv, helped, p := rerunSetup(t, ids, nil)
	if status, _ := post(t, srv.URL+"/run", runBody); status != http.StatusOK {
		t.Fatalf("the run: %d", status)
	}
	status, text := send(t, "GET", srv.URL+"/threads/t1", "", "")
	var th struct {
		Messages []struct {
			ToolCalls []struct{ ID string }
		}
	}
	if status != http.StatusOK || json.Unmarshal([]byte(text), &th) != nil || len(th.Messages) < 2 || len(th.Messages[1].ToolCalls) == 0 {
		t.Fatalf("the thread: %d %s", status, text)
	}
	call := th.Messages[1].ToolCalls[0].ID
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	// What a form of another site posts: its one field's name and value
	// joined by "=", shaped as JSON.
	form := `{"threadId":"t1","runId":"evil","toolCallId":"` + call + `","task":"send it again","x":"=1"}`
	run := `{"threadId":"evil","runId":"r9","messages":[{"id":"m1","role":"user","content":"hi"}]}`
	crossSite := []string{"Origin", "http://evil.test", "Sec-Fetch-Site", "cross-site"}
	rebound := []string{"Origin", "http://rebind.test:" + port, "Sec-Fetch-Site", "same-origin"}
	calls, helps := p.Calls(), helped.Load()
	for _, c := range []struct {
		name, method, path, host, body string
		header                         []string
		want                           int
	}{
		{"a form's re-run", "POST", "/rerun", "", form, append([]string{"Content-Type", "text/plain"}, crossSite...), 403},
		{"a form's run", "POST", "/run", "", run, append([]string{"Content-Type", "text/plain"}, crossSite...), 403},
		{"a no-cors fetch with no Content-Type", "POST", "/run", "", run, crossSite, 403},
		{"a beacon", "POST", "/run", "", run, append([]string{"Content-Type", "text/plain;charset=UTF-8"}, crossSite...), 403},
		{"a cross-site JSON re-run", "POST", "/rerun", "", form, append([]string{"Content-Type", "application/json"}, crossSite...), 403},
		{"a cross-site delete", "DELETE", "/threads/t1", "", "", append([]string{"Content-Type", "application/json"}, crossSite...), 403},
		{"a re-run as text", "POST", "/rerun", "", form, []string{"Content-Type", "text/plain"}, 415},
		{"a run with no Content-Type", "POST", "/run", "", run, nil, 415},
		{"a rebound page", "GET", "/", "rebind.test:" + port, "", nil, 421},
		{"a rebound listing", "GET", "/threads/", "rebind.test:" + port, "", nil, 421},
		{"a rebound thread", "GET", "/threads/t1", "rebind.test:" + port, "", nil, 421},
		{"a rebound read of the runs", "GET", "/runs/t1", "rebind.test:" + port, "", nil, 421},
		{"a rebound re-run", "POST", "/rerun", "rebind.test:" + port, form, append([]string{"Content-Type", "application/json"}, rebound...), 421},
		{"a rebound run", "POST", "/run", "rebind.test:" + port, run, append([]string{"Content-Type", "application/json"}, rebound...), 421},
	} {
		status, text := send(t, c.method, srv.URL+c.path, c.host, c.body, c.header...)
		if status != c.want || !strings.Contains(text, `"error"`) {
			t.Errorf("%s: %d %.200s, want %d and why", c.name, status, text, c.want)
		}
	}
	if p.Calls() != calls || helped.Load() != helps {
		t.Errorf("refused requests called the models %d times and the helper %d times, want none", p.Calls()-calls, helped.Load()-helps)
	}
	if status, text := send(t, "GET", srv.URL+"/threads/evil", "", ""); status != http.StatusNotFound {
		t.Errorf("a refused run left a thread: %d %s", status, text)
	}

	// The viewer's own page, at 127.0.0.1 or localhost.
	for _, host := range []string{"", "localhost:" + port} {
		origin := "http://" + host
		if host == "" {
			origin = srv.URL
		}
		own := []string{"Content-Type", "application/json", "Origin", origin, "Sec-Fetch-Site", "same-origin"}
		if status, text := send(t, "GET", srv.URL+"/", host, ""); status != http.StatusOK || !strings.Contains(text, "<html") {
			t.Errorf("the page at %q: %d", host, status)
		}
		helps := helped.Load()
		status, text := send(t, "POST", srv.URL+"/rerun", host, `{"threadId":"t1","runId":"r-`+port+host+`","toolCallId":"`+call+`","task":"again"}`, own...)
		if status != http.StatusOK || !strings.Contains(text, "RUN_FINISHED") || helped.Load() != helps+1 {
			t.Errorf("the page's re-run at %q: %d, the helper ran %d times, want once:\n%.500s", host, status, helped.Load()-helps, text)
		}
	}
}

// WithHosts adds names the viewer answers to; the AG-UI handler it passes
// runs to is given them too.
func TestWithHosts(t *testing.T) {
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(fake.NewProvider(fake.Text("hello")))
	}, agui.WithThreads(st), agui.WithHosts("devbox.local"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := devui.New(h, devui.WithStore(st), devui.WithHosts("devbox.local"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(v)
	defer srv.Close()
	own := []string{"Content-Type", "application/json", "Origin", "http://devbox.local:8080", "Sec-Fetch-Site", "same-origin"}
	if status, text := send(t, "POST", srv.URL+"/run", "devbox.local:8080", runBody, own...); status != http.StatusOK || !strings.Contains(text, "RUN_FINISHED") {
		t.Errorf("a run at a named host: %d %.300s", status, text)
	}
	if status, _ := send(t, "GET", srv.URL+"/runs/t1", "other.local", ""); status != http.StatusMisdirectedRequest {
		t.Errorf("another host: %d, want 421", status)
	}
	for _, o := range []devui.Option{devui.WithHosts(), devui.WithHosts("http://devbox.local")} {
		if _, err := devui.New(h, o); err == nil {
			t.Error("a bad WithHosts was taken")
		}
	}
}
