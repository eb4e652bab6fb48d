package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/providertest"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// forkTask is the task of the lead's i-th context fork.
func forkTask(i int) string { return fmt.Sprintf("Summarize what the findings say about site %d.", i) }

// forkLeadServer is the Chat Completions API behind a lead that reads a long
// context, calls a tool, then starts forks context forks at once and
// answers: it checks each request as the API would, keeps its body as
// sent, and answers by what the request's conversation ends with.
type forkLeadServer struct {
	t      *testing.T
	forks  int
	mu     sync.Mutex
	bodies [][]byte
}

func (s *forkLeadServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	wire, req, err := decodeRequest(body)
	if err != nil {
		s.t.Errorf("the provider sent a request the API would reject: %v\n%s", err, body)
		writeError(w, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	s.mu.Unlock()
	reply := s.reply(req)
	if wire.Stream {
		writeStream(w, r, reply)
		return
	}
	writeJSON(w, http.StatusOK, completion(reply))
}

func (s *forkLeadServer) reply(req provider.Request) providertest.Reply {
	last := req.Messages[len(req.Messages)-1]
	u := provider.Usage{InputTokens: 3000, OutputTokens: 20}
	switch {
	case last.Role == provider.RoleUser && strings.HasPrefix(last.Content, "Summarize what the findings say"):
		return providertest.Reply{Text: "Soil fine, water fine, traffic heavy.", Usage: u}
	case last.Role == provider.RoleTool && last.ToolCallID == "call_weather":
		calls := make([]provider.ToolCall, s.forks)
		for i := range calls {
			raw, _ := json.Marshal(map[string]string{"task": forkTask(i)})
			calls[i] = provider.ToolCall{ID: fmt.Sprintf("call_spawn_%d", i), Name: subagent.SpawnToolName, Arguments: raw}
		}
		return providertest.Reply{ToolCalls: calls, Usage: u}
	case last.Role == provider.RoleTool:
		return providertest.Reply{Text: "All sites summarized.", Usage: u}
	}
	return providertest.Reply{ToolCalls: []provider.ToolCall{{ID: "call_weather", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}}, Usage: u}
}

// TestContextForksOnTheWire runs a lead whose second step starts four
// context forks through the Chat Completions adapter, and reads the bodies
// the server received: each fork's request repeats the lead's request of
// that step — model, tools and every message, the system message first —
// byte for byte, with the lead's prompt_cache_key, so that OpenAI routes
// it to the cache the lead's request filled and reads the prefix; the task
// is the one message after it. Forks 2..4 send the same bytes as fork 1
// but for their task.
func TestContextForksOnTheWire(t *testing.T) {
	clearEnv(t)
	const forks = 4
	s := &forkLeadServer{t: t, forks: forks}
	srv := httptest.NewServer(s)
	defer srv.Close()
	p := newTestProvider(t, srv)

	reg, err := tool.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	weather, err := tool.New("get_weather", "The weather in a city.", func(_ context.Context, in struct {
		City string `json:"city"`
	}) (string, error) {
		return "sunny in " + in.City, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subagent.NewSpawner(p, reg, subagent.WithContextForks(), subagent.WithMaxSpawns(forks))
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range []tool.Tool{weather, sp} {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithRegistry(reg),
		agent.WithSystemPrompt("You lead a survey team. Delegate one site to each sub-agent."))
	if err != nil {
		t.Fatal(err)
	}
	history := []provider.Message{
		provider.UserMessage("Here are the survey's findings: " + strings.Repeat("site figures in full. ", 200)),
		provider.AssistantMessage("I have read them."),
	}
	out, err := lead.Run(t.Context(), agent.Input{Messages: history, Text: "Check the weather in Paris, then summarize every site."})
	if err != nil {
		t.Fatal(err)
	}
	if out.Answer != "All sites summarized." {
		t.Fatalf("answer %q", out.Answer)
	}

	// The lead's request of the step that spawned ends with the weather
	// result; a fork's ends with its task.
	var parent []byte
	forkBodies := map[int][]byte{}
	for _, b := range s.bodies {
		_, req, _ := decodeRequest(b)
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Role == provider.RoleTool && last.ToolCallID == "call_weather":
			parent = b
		case last.Role == provider.RoleUser && strings.HasPrefix(last.Content, "Summarize what"):
			for i := range forks {
				if strings.HasPrefix(last.Content, forkTask(i)) {
					forkBodies[i] = b
				}
			}
		}
	}
	if parent == nil || len(forkBodies) != forks || len(s.bodies) != 3+forks {
		t.Fatalf("%d requests, %d of them forks' (want 3 of the lead's and %d forks')", len(s.bodies), len(forkBodies), forks)
	}

	type body struct {
		Model          json.RawMessage   `json:"model"`
		Tools          json.RawMessage   `json:"tools"`
		PromptCacheKey json.RawMessage   `json:"prompt_cache_key"`
		Messages       []json.RawMessage `json:"messages"`
	}
	var lb body
	if err := json.Unmarshal(parent, &lb); err != nil {
		t.Fatal(err)
	}
	if string(lb.PromptCacheKey) != `"lead"` {
		t.Fatalf("the lead's prompt_cache_key is %s, want its name", lb.PromptCacheKey)
	}
	for i := range forks {
		var fb body
		if err := json.Unmarshal(forkBodies[i], &fb); err != nil {
			t.Fatal(err)
		}
		for _, f := range []struct {
			name      string
			lead, got json.RawMessage
		}{{"model", lb.Model, fb.Model}, {"tools", lb.Tools, fb.Tools}, {"prompt_cache_key", lb.PromptCacheKey, fb.PromptCacheKey}} {
			if !bytes.Equal(f.lead, f.got) {
				t.Errorf("fork %d: %s is not the lead's, byte for byte:\nlead %s\nfork %s", i, f.name, f.lead, f.got)
			}
		}
		if len(fb.Messages) != len(lb.Messages)+1 {
			t.Fatalf("fork %d sends %d messages, want the lead's %d and its task", i, len(fb.Messages), len(lb.Messages))
		}
		for m, lm := range lb.Messages {
			if !bytes.Equal(lm, fb.Messages[m]) {
				t.Errorf("fork %d: messages[%d] is not the lead's, byte for byte:\nlead %s\nfork %s", i, m, lm, fb.Messages[m])
			}
		}
		var task struct{ Role, Content string }
		if err := json.Unmarshal(fb.Messages[len(lb.Messages)], &task); err != nil || task.Role != "user" || !strings.HasPrefix(task.Content, forkTask(i)) {
			t.Errorf("fork %d: the message after the shared prefix is %s, want its task", i, fb.Messages[len(lb.Messages)])
		}
		// Forks 2..N: fork 0's bytes, but for the task.
		if i > 0 {
			a := bytes.ReplaceAll(forkBodies[0], []byte(forkTask(0)), []byte("TASK"))
			b := bytes.ReplaceAll(forkBodies[i], []byte(forkTask(i)), []byte("TASK"))
			if !bytes.Equal(a, b) {
				t.Errorf("fork %d's request differs from fork 0's by more than its task:\nfork 0 %s\nfork %d %s", i, a, i, b)
			}
		}
	}
}
