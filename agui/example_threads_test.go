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
