package anthropic_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
)

// forkLeadServer is the Messages API behind wiretest.ForkLead: it
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
	writeJSON(w, http.StatusOK, message(reply))
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
	lead := &wiretest.ForkLead{Forks: forks, IDPrefix: "toolu_"}
	srv := httptest.NewServer(&forkLeadServer{t: t, lead: lead})
	defer srv.Close()
	parent, forkBodies := lead.Run(t, newTestProvider(t, srv), func(b []byte) (provider.Request, error) {
		_, req, err := decodeRequest(b)
		return req, err
	})

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
		if !bytes.Contains(task, []byte(wiretest.ForkTask(i))) {
			t.Errorf("fork %d: the block after the shared prefix is %s, want its task", i, task)
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
