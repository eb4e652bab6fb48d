package tool_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deputy-go/deputy/tool"
)

// sendTool sends its text somewhere, taking longer the earlier its call
// comes in the step; its sends keep their order (tool.Sequencer), its
// peeks do not.
type sendTool struct {
	mu   sync.Mutex
	sent []string
}

func (s *sendTool) Definition() tool.Definition {
	return tool.Definition{Name: "send", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (s *sendTool) InOrder(c tool.Call) bool {
	var a struct{ Peek bool }
	return json.Unmarshal(c.Arguments, &a) == nil && !a.Peek
}

func (s *sendTool) Call(ctx context.Context, c tool.Call) (tool.Result, error) {
	var a struct {
		Text  string
		Delay int
		Peek  bool
	}
	if err := json.Unmarshal(c.Arguments, &a); err != nil {
		return tool.Result{}, err
	}
	time.Sleep(time.Duration(a.Delay) * time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, a.Text)
	return tool.Result{Content: a.Text}, nil
}

// The calls of a step a Sequencer asks to keep in order run one after
// the other, in call order, however long each takes; the step's other
// calls run beside them.
func TestSequencerCallsRunInCallOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sendTool{}
		reg, err := tool.NewRegistry(s)
		if err != nil {
			t.Fatal(err)
		}
		calls := []tool.Call{
			{ID: "1", Name: "send", Arguments: json.RawMessage(`{"text":"a","delay":40}`)},
			{ID: "2", Name: "send", Arguments: json.RawMessage(`{"text":"peek","delay":1,"peek":true}`)},
			{ID: "3", Name: "send", Arguments: json.RawMessage(`{"text":"b","delay":20}`)},
			{ID: "4", Name: "send", Arguments: json.RawMessage(`{"text":"c","delay":10}`)},
		}
		start := time.Now()
		results, err := reg.Execute(t.Context(), calls)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"peek", "a", "b", "c"}; !slices.Equal(s.sent, want) {
			t.Errorf("sent %v, want %v: the sends in call order, the peek beside them", s.sent, want)
		}
		if got := time.Since(start); got != 70*time.Millisecond {
			t.Errorf("the step took %v, want 70ms: the sends one after the other", got)
		}
		for i, r := range results {
			var a struct{ Text string }
			_ = json.Unmarshal(calls[i].Arguments, &a)
			if r.Content != a.Text {
				t.Errorf("result %d is %q, want %q", i, r.Content, a.Text)
			}
		}
	})
}
