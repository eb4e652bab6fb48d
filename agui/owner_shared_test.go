package agui_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/provider"
)

// seenModel answers every request with "ok" and keeps the text of each
// request's messages.
type seenModel struct {
	mu   sync.Mutex
	seen []string
}

func (m *seenModel) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	var b strings.Builder
	for _, msg := range req.Messages {
		b.WriteString(msg.Content)
		b.WriteString("\n")
	}
	m.mu.Lock()
	m.seen = append(m.seen, b.String())
	m.mu.Unlock()
	return provider.Response{Message: provider.AssistantMessage("ok"), Usage: provider.Usage{InputTokens: 1, OutputTokens: 1, Requests: 1}}, nil
}

// A *agent.React keeps one conversation for every run, so one served to
// many owners (New with WithAuthorize) would hand one owner's messages to
// another's model request: New refuses it, naming NewPerRequest, and an
// agent built per request never shows bob what ann said.
func TestSharedAgentKeepsNoOwnerFromAnother(t *testing.T) {
	auth := agui.WithAuthorize(func(r *http.Request, _ string) (string, error) { return r.Header.Get("X-User"), nil })
	turns := func(h http.Handler, m *seenModel) {
		t.Helper()
		srv := serve(t, h)
		for _, u := range []struct{ who, text string }{{"ann", "ann's secret"}, {"bob", "hello"}} {
			resp := post(t, srv.URL, `{"threadId":"t1","runId":"r-`+u.who+`","messages":[{"id":"m1","role":"user","content":"`+u.text+`"}]}`, "X-User", u.who)
			if _, err := io.ReadAll(resp.Body); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.seen) != 2 {
			t.Fatalf("the model was asked %d times, want 2", len(m.seen))
		}
		if strings.Contains(m.seen[1], "ann") {
			t.Errorf("bob's request holds ann's message: %q", m.seen[1])
		}
	}

	m := &seenModel{}
	lead, err := agent.NewReact(m)
	if err != nil {
		t.Fatal(err)
	}
	h, err := agui.New(lead, auth)
	if err == nil {
		turns(h, m)
		t.Fatal("New served a *agent.React, which keeps one conversation, to many owners (WithAuthorize)")
	} else if !strings.Contains(err.Error(), "NewPerRequest") {
		t.Errorf("New's refusal %q does not say to use NewPerRequest", err)
	}

	// An agent that keeps no conversation is served to many owners.
	if _, err := agui.New(agent.Func(func(context.Context, agent.Input) (agent.Output, error) { return agent.Output{}, nil }), auth); err != nil {
		t.Errorf("New refused an agent that keeps no conversation: %v", err)
	}

	m = &seenModel{}
	h, err = agui.NewPerRequest(func(context.Context, *agui.RunInput) (agent.Agent, error) { return agent.NewReact(m) }, auth)
	if err != nil {
		t.Fatal(err)
	}
	turns(h, m)
}
