package mcpbridge

import (
	"crypto/sha256"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/deputy-go/deputy/tool"
)

func TestCallsWaitingForAnswersAreBounded(t *testing.T) {
	s := NewServer("bounds", "1")
	var first *waiting
	for i := range maxWaiting {
		w := &waiting{tool: "t", turn: "mcp/t" + string(rune('a'+i%26))}
		if _, err := s.wait(w); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if first == nil {
			first = w
		}
	}
	if _, err := s.wait(&waiting{tool: "t", turn: "mcp/over"}); err == nil || !strings.Contains(err.Error(), "calls waiting for answers already") {
		t.Fatalf("call %d: %v, want a refusal", maxWaiting+1, err)
	}
	// One that waited too long makes room.
	s.mu.Lock()
	first.expires = time.Now().Add(-time.Second)
	s.mu.Unlock()
	if _, err := s.wait(&waiting{tool: "t", turn: "mcp/after"}); err != nil {
		t.Fatalf("after one expired: %v", err)
	}
	if len(s.waiting) != maxWaiting {
		t.Errorf("%d calls waiting, want %d", len(s.waiting), maxWaiting)
	}
}

func TestAnAnswerAfterItsCallExpiredIsRefused(t *testing.T) {
	s := NewServer("bounds", "1")
	call := tool.Call{ID: "c", Name: "t", Arguments: json.RawMessage(`{}`)}
	w := &waiting{tool: "t", args: sha256.Sum256(call.Arguments), turn: "mcp/x"}
	token, err := s.wait(w)
	if err != nil {
		t.Fatal(err)
	}
	w.expires = time.Now().Add(-time.Second)
	if _, err := s.resume(token, nil, call); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("an expired call's answer: %v, want a refusal", err)
	}
	if len(s.waiting) != 0 {
		t.Errorf("the expired call is still kept")
	}
}

func TestAnAnswerForOtherArgumentsIsRefused(t *testing.T) {
	s := NewServer("bounds", "1")
	call := tool.Call{ID: "c", Name: "t", Arguments: json.RawMessage(`{"amount":1}`)}
	token, err := s.wait(&waiting{tool: "t", args: sha256.Sum256(call.Arguments), turn: "mcp/y"})
	if err != nil {
		t.Fatal(err)
	}
	other := call
	other.Arguments = json.RawMessage(`{"amount":1000000}`)
	if _, err := s.resume(token, nil, other); err == nil {
		t.Error("an answer given for other arguments was taken")
	}
	if _, err := s.resume(token, nil, call); err != nil {
		t.Errorf("the answer for its own call: %v", err)
	}
}
