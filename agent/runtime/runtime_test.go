package runtime_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agent/runtime"
	"github.com/deputy-go/deputy/internal/conversation"
	"github.com/deputy-go/deputy/provider"
)

// The pieces a runtime of its own compacts with say when, where and how,
// as a React does: the result keeps the latest turns and is one a model
// accepts, and a conversation just compacted has nothing more to fold.
func TestCompactionPiecesForOtherRuntimes(t *testing.T) {
	var hist []provider.Message
	for i := range 10 {
		hist = append(hist, provider.UserMessage("q"+strconv.Itoa(i)), provider.AssistantMessage("a"+strconv.Itoa(i)))
	}
	c := runtime.NewCompactor(agent.Compaction{MaxMessages: 8, KeepTurns: 2})
	if !c.Due(hist, 0) || c.Due(hist[:8], 0) {
		t.Fatalf("due at 20 messages %v, at 8 %v; the bound is 8", c.Due(hist, 0), c.Due(hist[:8], 0))
	}
	cut := c.Plan(hist, 0)
	if cut != 16 {
		t.Fatalf("plan folds %d messages, want the 16 before the last two turns", cut)
	}
	req := c.SummaryRequest(hist[:cut], "small", 0)
	if req.System != agent.DefaultSummaryPrompt || req.Model != "small" || !strings.Contains(req.Messages[0].Content, "User: q0") || strings.Contains(req.Messages[0].Content, "q8") {
		t.Fatalf("summary request %+v", req)
	}
	out := c.Apply(hist, cut, "q0 to q7 were asked and answered")
	if len(out) != 6 || conversation.Check(out) != nil || out[2].Content != "q8" || !strings.Contains(out[0].Content, "q0 to q7") {
		t.Fatalf("applied: %v", out)
	}
	if got := c.Plan(out, 0); got != 0 {
		t.Errorf("a conversation just compacted to its kept turns plans to fold %d more", got)
	}
	if len(hist) != 20 || hist[0].Content != "q0" {
		t.Error("Apply changed the conversation it was given")
	}
}
