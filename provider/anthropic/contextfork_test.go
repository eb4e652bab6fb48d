package anthropic_test

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

// forkLeadServer is the Messages API behind a lead that reads a long
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
	writeJSON(w, http.StatusOK, message(reply))
}

func (s *forkLeadServer) reply(req provider.Request) providertest.Reply {
	last := req.Messages[len(req.Messages)-1]
	u := provider.Usage{InputTokens: 3000, OutputTokens: 20}
	switch {
	case last.Role == provider.RoleUser && strings.HasPrefix(last.Content, "Summarize what the findings say"):
		return providertest.Reply{Text: "Soil fine, water fine, traffic heavy.", Usage: u}
	case last.Role == provider.RoleTool && last.ToolCallID == "toolu_weather":
		calls := make([]provider.ToolCall, s.forks)
		for i := range calls {
			raw, _ := json.Marshal(map[string]string{"task": forkTask(i)})
			calls[i] = provider.ToolCall{ID: fmt.Sprintf("toolu_spawn_%d", i), Name: subagent.SpawnToolName, Arguments: raw}
		}
		return providertest.Reply{ToolCalls: calls, Usage: u}
	case last.Role == provider.RoleTool:
		return providertest.Reply{Text: "All sites summarized.", Usage: u}
	}
	return providertest.Reply{ToolCalls: []provider.ToolCall{{ID: "toolu_weather", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}}, Usage: u}
}

// TestContextForksOnTheWire runs a lead whose second step starts four
// context forks through the Messages API adapter, and reads the bodies the
// server received: each fork's request repeats the lead's request of that
// step — system, tools, model and every content block, cache_control
// included — byte for byte, and adds its task as the last block, after
// the block that ends the shared prefix, which carries a breakpoint in
// the lead's request (so the lead wrote the prefix to the cache) and in
// every fork's (so each reads it). Forks 2..4 send the same bytes as fork
// 1 but for their task.
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
		case last.Role == provider.RoleTool && last.ToolCallID == "toolu_weather":
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
		Model    json.RawMessage `json:"model"`
		System   json.RawMessage `json:"system"`
		Tools    json.RawMessage `json:"tools"`
		Messages []struct {
			Role    string            `json:"role"`
			Content []json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	var lb body
	if err := json.Unmarshal(parent, &lb); err != nil {
		t.Fatal(err)
	}
	shared := len(lb.Messages) - 1 // the turn that ends the shared prefix
	endBlock := lb.Messages[shared].Content[len(lb.Messages[shared].Content)-1]
	if !bytes.Contains(endBlock, []byte(`"cache_control":{"type":"ephemeral"}`)) {
		t.Fatalf("the lead's request marks no breakpoint where the forks' shared prefix ends: %s", endBlock)
	}
	for i := range forks {
		var fb body
		if err := json.Unmarshal(forkBodies[i], &fb); err != nil {
			t.Fatal(err)
		}
		for _, f := range []struct {
			name      string
			lead, got json.RawMessage
		}{{"model", lb.Model, fb.Model}, {"system", lb.System, fb.System}, {"tools", lb.Tools, fb.Tools}} {
			if !bytes.Equal(f.lead, f.got) {
				t.Errorf("fork %d: %s is not the lead's, byte for byte:\nlead %s\nfork %s", i, f.name, f.lead, f.got)
			}
		}
		if len(fb.Messages) != len(lb.Messages) {
			t.Fatalf("fork %d sends %d turns, want the lead's %d, its task joining the last", i, len(fb.Messages), len(lb.Messages))
		}
		for m, lm := range lb.Messages {
			fm := fb.Messages[m]
			want := len(lm.Content)
			if m == shared {
				want++ // the task, after the shared blocks
			}
			if fm.Role != lm.Role || len(fm.Content) != want {
				t.Fatalf("fork %d: turn %d is a %s turn of %d blocks, want a %s turn of %d", i, m, fm.Role, len(fm.Content), lm.Role, want)
			}
			for j, lblock := range lm.Content {
				if !bytes.Equal(lblock, fm.Content[j]) {
					t.Errorf("fork %d: messages[%d].content[%d] is not the lead's, byte for byte:\nlead %s\nfork %s", i, m, j, lblock, fm.Content[j])
				}
			}
		}
		if n := bytes.Count(forkBodies[i], []byte(`"cache_control"`)); n > 4 {
			t.Errorf("fork %d marks %d breakpoints; the API takes at most 4", i, n)
		}
		task := fb.Messages[shared].Content[len(fb.Messages[shared].Content)-1]
		if !bytes.Contains(task, []byte(forkTask(i))) {
			t.Errorf("fork %d: the block after the shared prefix is %s, want its task", i, task)
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
