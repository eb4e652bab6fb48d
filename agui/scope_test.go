package agui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// recall is an expert's model that keeps every request it is sent.
type recall struct {
	mu   sync.Mutex
	reqs [][]provider.Message
}

func (m *recall) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req.Messages)
	m.mu.Unlock()
	return provider.Response{Message: provider.AssistantMessage("noted"), StopReason: provider.StopEndTurn}, nil
}

// consults is a lead's model that hands each user message to the expert.
var consults = provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == provider.RoleTool {
		return provider.Response{Message: provider.AssistantMessage("told the expert")}, nil
	}
	args, _ := json.Marshal(map[string]string{"task": last.Content})
	return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "c", Name: "expert", Arguments: args})}, nil
})

var userSecret = regexp.MustCompile(`secret-(u\d+)-(\d+)`)

// Fifty users hammer one served expert, scoped per thread, each on a
// thread of the same id: no conversation holds another's text, each holds
// all of its own, and deleting a thread deletes its expert's memory.
func TestPerThreadExpertServedToFiftyUsers(t *testing.T) {
	for _, stored := range []bool{true, false} {
		t.Run(fmt.Sprint("stored=", stored), func(t *testing.T) { perThreadExpertServed(t, stored) })
	}
}

func perThreadExpertServed(t *testing.T, stored bool) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	m := &recall{}
	var opts []subagent.Option
	if stored {
		opts = append(opts, subagent.WithStore(st, "experts/notes"))
	}
	expert, err := subagent.FromScoped("expert", "Remembers what it is told in this thread.", subagent.PerThread,
		func(string) (agent.Agent, error) { return agent.NewReact(m, agent.WithName("expert")) }, opts...)
	if err != nil {
		t.Fatal(err)
	}
	h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(consults, agent.WithName("lead"), agent.WithTools(expert))
	}, agui.WithThreads(st), agui.WithAuthorize(byUser), agui.WithScopedResidents(expert)))
	mux := http.NewServeMux()
	mux.Handle("/agui", h)
	mux.Handle("/threads/", http.StripPrefix("/threads", h.Threads()))
	url := serve(t, identify(mux)).URL
	var wg sync.WaitGroup
	for u := range 50 {
		wg.Go(func() {
			for i := range 3 {
				status, b := as(t, fmt.Sprint("u", u), http.MethodPost, url+"/agui", body("t", fmt.Sprintf("secret-u%d-%d", u, i)))
				if status != http.StatusOK || !strings.Contains(b, "told the expert") {
					t.Errorf("user %d turn %d: %d %.300s", u, i, status, b)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(m.reqs) != 150 {
		t.Fatalf("the expert was asked %d times, want 150", len(m.reqs))
	}
	for _, msgs := range m.reqs {
		var text strings.Builder
		for _, msg := range msgs {
			text.WriteString(msg.Content)
		}
		found := userSecret.FindAllStringSubmatch(text.String(), -1)
		for i, f := range found {
			if f[1] != found[0][1] || f[2] != fmt.Sprint(i) {
				t.Fatalf("an expert conversation holds %v: want one user's secrets, in order, all of them", found)
			}
		}
	}
	// Deleting u7's thread deletes its expert's memory, and only its.
	if status, _ := as(t, "u7", http.MethodDelete, url+"/threads/t", ""); status != http.StatusNoContent {
		t.Fatalf("delete: %d", status)
	}
	m.reqs = nil
	for _, u := range []string{"u7", "u8"} {
		mustStatus(t, http.StatusOK)(as(t, u, http.MethodPost, url+"/agui", body("t", "secret-"+u+"-3")))
	}
	for _, msgs := range m.reqs {
		owner := userSecret.FindStringSubmatch(msgs[len(msgs)-1].Content)[1]
		if want := map[string]int{"u7": 1, "u8": 7}[owner]; len(msgs) != want {
			t.Fatalf("after deleting u7's thread, %s's expert saw %d messages, want %d", owner, len(msgs), want)
		}
	}
}
