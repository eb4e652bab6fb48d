package agui_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
)

// With threads kept on the server, a client sends only its new message;
// the agent, built fresh for each request, is handed the whole thread.
func ExampleWithThreads() {
	dir, _ := os.MkdirTemp("", "threads-example")
	defer os.RemoveAll(dir)
	b, err := sqlite.Open(filepath.Join(dir, "deputy.db"))
	if err != nil {
		log.Fatal(err)
	}
	st, _ := store.New(b)
	defer st.Close()

	// A model that says how many messages it was sent.
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage(fmt.Sprintf("I see %d messages.", len(req.Messages)))}, nil
	})
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(model)
	}, agui.WithThreads(st))
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	for _, text := range []string{"Hello.", "And now?"} {
		body := `{"threadId":"t-1","runId":"r","messages":[{"id":"m","role":"user","content":"` + text + `"}]}`
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		stream, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(stream), "\n") {
			if strings.Contains(line, `"RUN_FINISHED"`) {
				i := strings.Index(line, `"result":`)
				fmt.Println(line[i+len(`"result":`) : len(line)-1])
			}
		}
	}
	// Output:
	// "I see 1 messages."
	// "I see 3 messages."
}

// sessionUser is where an application's identity middleware puts the
// signed-in user.
type sessionUser struct{}

// With WithAuthorize the application names the owner of each request's
// thread before anything of the thread is read, and refuses a caller it
// does not know with its own answer; threads are kept per owner, so two
// users' threads never meet, whatever their ids.
func ExampleWithAuthorize() {
	dir, _ := os.MkdirTemp("", "owners-example")
	defer os.RemoveAll(dir)
	b, err := sqlite.Open(filepath.Join(dir, "deputy.db"))
	if err != nil {
		log.Fatal(err)
	}
	st, _ := store.New(b)
	defer st.Close()

	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage(fmt.Sprintf("I see %d messages.", len(req.Messages)))}, nil
	})
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(model)
	}, agui.WithThreads(st), agui.WithAuthorize(func(r *http.Request, threadID string) (string, error) {
		user, _ := r.Context().Value(sessionUser{}).(string)
		if user == "" {
			return "", &agui.Refusal{Status: http.StatusUnauthorized}
		}
		return user, nil // each user owns the threads they name
	}))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/agui", h)
	mux.Handle("/threads/", http.StripPrefix("/threads", h.Threads()))
	// Identity middleware: a header here, a session cookie in a real server.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get("X-Demo-User"); u != "" {
			r = r.WithContext(context.WithValue(r.Context(), sessionUser{}, u))
		}
		mux.ServeHTTP(w, r)
	}))
	defer srv.Close()

	send := func(user, method, path, body string) string {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if user != "" {
			req.Header.Set("X-Demo-User", user)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if i := strings.Index(string(b), `"result":`); i >= 0 {
			return resp.Status + " " + strings.SplitN(string(b)[i+len(`"result":`):], "}", 2)[0]
		}
		return resp.Status + " " + strings.TrimSpace(string(b))
	}
	run := `{"threadId":"t-1","runId":"r","messages":[{"id":"m","role":"user","content":"Hello."}]}`
	fmt.Println(send("alice", http.MethodPost, "/agui", run))
	fmt.Println(send("alice", http.MethodPost, "/agui", run))
	fmt.Println(send("bob", http.MethodPost, "/agui", run)) // bob's own t-1
	fmt.Println(send("", http.MethodPost, "/agui", run))
	fmt.Println(send("alice", http.MethodGet, "/threads/", ""))
	// Output:
	// 200 OK "I see 1 messages."
	// 200 OK "I see 3 messages."
	// 200 OK "I see 1 messages."
	// 401 Unauthorized {"error":"Unauthorized"}
	// 200 OK {"threads":["t-1"]}
}
