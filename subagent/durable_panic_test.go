package subagent

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/conversation"
	"github.com/deputy-go/deputy/tool"
)

// panicky is a stored resident whose Snapshot or Restore panics while its
// switch is on, as a user's Persistent might.
type panicky struct {
	*agent.React
	snapshot, restore atomic.Bool
}

func (p *panicky) Snapshot() ([]byte, error) {
	if p.snapshot.Load() {
		panic("snapshot broke")
	}
	return p.React.Snapshot()
}

func (p *panicky) Restore(data []byte) error {
	if p.restore.Load() {
		panic("restore broke")
	}
	return p.React.Restore(data)
}

// Mark and SnapshotFrom are the React's: with AppendParts and RestoreParts
// they make the agent an Appender.
func (p *panicky) Mark() (uint64, int) { return p.React.Parts(conversation.Key{}).Mark() }

func (p *panicky) SnapshotFrom(n int) ([]byte, error) {
	return p.React.Parts(conversation.Key{}).SnapshotFrom(n)
}

// AppendParts is how parts another process added come back.
func (p *panicky) AppendParts(parts ...[]byte) error {
	if p.restore.Load() {
		panic("restore broke")
	}
	return p.React.Parts(conversation.Key{}).AppendParts(parts...)
}

// RestoreParts is how a conversation stored in parts comes back.
func (p *panicky) RestoreParts(parts ...[]byte) error {
	if p.restore.Load() {
		panic("restore broke")
	}
	return p.React.Parts(conversation.Key{}).RestoreParts(parts...)
}

// A panic in a stored resident's Snapshot or Restore becomes an error the
// caller's model reads, and the expert is free again for the next call:
// nothing panics out of the tool and no lock is left held.
func TestStoredResidentPanicsBecomeErrors(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "deputy.db"))
	e := &echo{}
	build := func() (*SubAgentTool, *panicky) {
		a := &panicky{React: newReact(t, e.provider(), agent.WithName("expert"))}
		return must(FromAgent("expert", "Knows things.", a, WithInputFromArgs(argsTask), WithStore(st, "expert")))(t), a
	}
	one, a := build()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	a.snapshot.Store(true)
	_, err := callTool(ctx, one, "call_1", `{"task":"first"}`)
	if !errors.Is(err, tool.ErrPanic) || !strings.Contains(err.Error(), "snapshot broke") {
		t.Fatalf("Snapshot panicked: %v, want an error saying so", err)
	}
	a.snapshot.Store(false)
	if _, err := callTool(ctx, one, "call_2", `{"task":"second"}`); err != nil {
		t.Fatalf("the call after a Snapshot panic: %v", err)
	}

	// Another tool on the same store must restore what the first stored.
	two, b := build()
	b.restore.Store(true)
	_, err = callTool(ctx, two, "call_3", `{"task":"third"}`)
	if !errors.Is(err, tool.ErrPanic) || !strings.Contains(err.Error(), "restore broke") {
		t.Fatalf("Restore panicked: %v, want an error saying so", err)
	}
	b.restore.Store(false)
	if _, err := callTool(ctx, two, "call_4", `{"task":"fourth"}`); err != nil {
		t.Fatalf("the call after a Restore panic: %v", err)
	}
}

// brokenCheckpoint is a resident that checkpoints its conversation with a
// restore function that panics, and whose runs fail.
type brokenCheckpoint struct{ runs atomic.Int64 }

func (b *brokenCheckpoint) Run(ctx context.Context, in agent.Input) (agent.Output, error) {
	b.runs.Add(1)
	return agent.Output{}, errors.New("the run failed")
}

func (b *brokenCheckpoint) Checkpoint() func() { return func() { panic("rollback broke") } }

// A checkpoint whose restore panics, after a failed run, gives the caller
// both failures as an error, and the expert takes the next call.
func TestCheckpointPanicBecomesError(t *testing.T) {
	a := &brokenCheckpoint{}
	sub := must(FromAgent("expert", "Knows things.", a))(t)
	for i := range 2 {
		_, err := callTool(t.Context(), sub, "call", `{"task":"x"}`)
		if err == nil || !strings.Contains(err.Error(), "the run failed") || !strings.Contains(err.Error(), "rollback broke") {
			t.Fatalf("call %d: %v, want the run's failure and the rollback's panic", i+1, err)
		}
	}
	if a.runs.Load() != 2 {
		t.Errorf("%d runs, want 2: the expert must take the second call", a.runs.Load())
	}
}
