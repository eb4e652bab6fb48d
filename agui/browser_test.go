package agui_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
)

// counted serves, on loopback, a handler with threads whose agent counts
// its runs.
func counted(t *testing.T, opts ...agui.Option) (base string, runs *atomic.Int64) {
	t.Helper()
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	runs = new(atomic.Int64)
	h, err := agui.NewPerRequest(func(context.Context, *agui.RunInput) (agent.Agent, error) {
		return agent.Func(func(context.Context, agent.Input) (agent.Output, error) {
			runs.Add(1)
			return agent.Output{Answer: "done"}, nil
		}), nil
	}, append([]agui.Option{agui.WithThreads(st)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/agui", h)
	mux.Handle("/threads/", http.StripPrefix("/threads", h.Threads()))
	return serve(t, mux).URL, runs
}

// send sends a request with a Host and headers, and returns its status
// and body.
func send(t *testing.T, method, url, host, body string, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const browserRun = `{"threadId":"t1","runId":"r1","messages":[{"id":"m1","role":"user","content":"hi"}]}`

// A page of another site, or one that rebound its name to the server's
// loopback address, neither starts a run nor reads a thread; clients that
// are not browsers are served as before.
func TestBrowserRequestsOfOtherSitesAreRefused(t *testing.T) {
	base, runs := counted(t)
	json := "application/json"
	local := strings.TrimPrefix(base, "http://")
	for _, c := range []struct {
		name         string
		method, path string
		host         string
		headers      []string
		want         int
	}{
		{"a cross-site fetch", "POST", "/agui", "", []string{"Content-Type", json, "Origin", "http://evil.test", "Sec-Fetch-Site", "cross-site"}, 403},
		{"a cross-site beacon with no Content-Type", "POST", "/agui", "", []string{"Origin", "http://evil.test", "Sec-Fetch-Site", "cross-site"}, 403},
		{"a page of another port, old browser", "POST", "/agui", "", []string{"Content-Type", json, "Origin", "http://localhost:9999"}, 403},
		{"a cross-site delete", "DELETE", "/threads/t1", "", []string{"Origin", "http://evil.test", "Sec-Fetch-Site", "cross-site"}, 403},
		{"a rebound page's run", "POST", "/agui", "rebind.test:" + local[strings.LastIndexByte(local, ':')+1:], []string{"Content-Type", json, "Origin", "http://rebind.test", "Sec-Fetch-Site", "same-origin"}, 421},
		{"a rebound page's listing", "GET", "/threads/", "rebind.test", nil, 421},
		{"a rebound page's read", "GET", "/threads/t1", "rebind.test", nil, 421},
		{"a client that is not a browser", "POST", "/agui", "", []string{"Content-Type", json}, 200},
		{"a client sending no Content-Type", "POST", "/agui", "", nil, 200},
		{"the server's own page", "POST", "/agui", "", []string{"Content-Type", json, "Origin", base, "Sec-Fetch-Site", "same-origin"}, 200},
		{"localhost", "GET", "/threads/", "localhost", nil, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := runs.Load()
			body := ""
			if c.method == "POST" {
				body = browserRun
			}
			status, text := send(t, c.method, base+c.path, c.host, body, c.headers...)
			if status != c.want {
				t.Fatalf("status %d, want %d: %s", status, c.want, text)
			}
			ran := runs.Load() - before
			if c.want != 200 && (ran != 0 || !strings.Contains(text, `"error"`)) {
				t.Errorf("refused, yet %d runs ran; answer %s", ran, text)
			}
			if c.want == 200 && c.method == "POST" && ran != 1 {
				t.Errorf("served, and %d runs ran, want 1", ran)
			}
		})
	}
}

func TestHostsAndOrigins(t *testing.T) {
	t.Run("WithHosts", func(t *testing.T) {
		base, _ := counted(t, agui.WithHosts("devbox.local"))
		if status, text := send(t, "GET", base+"/threads/", "devbox.local:8080", ""); status != 200 {
			t.Errorf("a named host: %d %s", status, text)
		}
		if status, _ := send(t, "GET", base+"/threads/", "other.local", ""); status != 421 {
			t.Errorf("another host: %d, want 421", status)
		}
	})
	t.Run("WithAnyHost", func(t *testing.T) {
		base, _ := counted(t, agui.WithAnyHost())
		if status, text := send(t, "GET", base+"/threads/", "api.example.com", ""); status != 200 {
			t.Errorf("any host: %d %s", status, text)
		}
	})
	t.Run("WithOrigins", func(t *testing.T) {
		base, runs := counted(t, agui.WithOrigins("https://app.example.com"))
		if status, text := send(t, "POST", base+"/agui", "", browserRun, "Content-Type", "application/json", "Origin", "https://app.example.com", "Sec-Fetch-Site", "cross-site"); status != 200 || runs.Load() != 1 {
			t.Errorf("a trusted origin: %d %s, %d runs", status, text, runs.Load())
		}
		if status, _ := send(t, "POST", base+"/agui", "", browserRun, "Content-Type", "application/json", "Origin", "https://evil.example.com", "Sec-Fetch-Site", "cross-site"); status != 403 {
			t.Errorf("another origin: %d, want 403", status)
		}
	})
}

func TestBrowserOptionsRefuseBadValues(t *testing.T) {
	build := func(context.Context, *agui.RunInput) (agent.Agent, error) { return nil, nil }
	for name, opts := range map[string][]agui.Option{
		"no hosts":             {agui.WithHosts()},
		"a URL as a host":      {agui.WithHosts("http://devbox.local")},
		"hosts and any host":   {agui.WithHosts("devbox.local"), agui.WithAnyHost()},
		"any host and hosts":   {agui.WithAnyHost(), agui.WithHosts("devbox.local")},
		"no origins":           {agui.WithOrigins()},
		"an origin with path":  {agui.WithOrigins("https://app.example.com/chat")},
		"an origin, no scheme": {agui.WithOrigins("app.example.com")},
	} {
		if _, err := agui.NewPerRequest(build, opts...); err == nil {
			t.Errorf("%s: taken", name)
		}
	}
}
