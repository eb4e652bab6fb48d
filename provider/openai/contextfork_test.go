package openai_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
)

// forkLeadServer is the Chat Completions API behind wiretest.ForkLead: it
// checks each request as the API would, keeps its body as sent and
// answers by what the request's conversation ends with.
type forkLeadServer struct {
	t    *testing.T
	lead *wiretest.ForkLead
}

func (s *forkLeadServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	wire, req, err := decodeRequest(body)
	if err != nil {
		s.t.Errorf("the provider sent a request the API would reject: %v\n%s", err, body)
		writeError(w, http.StatusBadRequest)
		return
	}
	s.lead.Keep(body)
	reply := s.lead.Reply(req)
	if wire.Stream {
		writeStream(w, r, reply)
		return
	}
	writeJSON(w, http.StatusOK, completion(reply))
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
	lead := &wiretest.ForkLead{Forks: forks, IDPrefix: "call_"}
	srv := httptest.NewServer(&forkLeadServer{t: t, lead: lead})
	defer srv.Close()
	parent, forkBodies := lead.Run(t, newTestProvider(t, srv), func(b []byte) (provider.Request, error) {
		_, req, err := decodeRequest(b)
		return req, err
	})

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
		if err := json.Unmarshal(fb.Messages[len(lb.Messages)], &task); err != nil || task.Role != "user" || !strings.HasPrefix(task.Content, wiretest.ForkTask(i)) {
			t.Errorf("fork %d: the message after the shared prefix is %s, want its task", i, fb.Messages[len(lb.Messages)])
		}
		// Forks 2..N: fork 0's bytes, but for the task.
		if i > 0 {
			a := bytes.ReplaceAll(forkBodies[0], []byte(wiretest.ForkTask(0)), []byte("TASK"))
			b := bytes.ReplaceAll(forkBodies[i], []byte(wiretest.ForkTask(i)), []byte("TASK"))
			if !bytes.Equal(a, b) {
				t.Errorf("fork %d's request differs from fork 0's by more than its task:\nfork 0 %s\nfork %d %s", i, a, i, b)
			}
		}
	}
}
