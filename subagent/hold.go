package subagent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/journal/stored"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

// A resident expert whose call was suspended by an interrupt (a tool.Ask
// at any depth under it) is held for that call: the resumed call must find
// the conversation as it left it. Until the call is resumed, abandoned, or
// every question it waits for has expired, other calls wait their turn
// (or, with WithRefuseWhenBusy, are refused with ErrBusy), as they do while
// it answers. Only a call under a journal can resume, so only such a call
// holds the expert.
//
// The hold names the suspended invocation by its stable run id, and an
// entry the call records in its turn's journal: deleting that journal
// (store.DeleteJournal, which the AG-UI handler does when it forgets a
// thread's suspended run) abandons the call and frees the expert. With
// WithStore the hold is a record in the store beside the conversation, so
// that every process consulting the expert sees it; without, it is kept in
// memory.

// hold is a resident expert held for a suspended call.
type hold struct {
	By    string    `json:"by"`              // the suspended invocation's stable run id
	Turn  string    `json:"turn"`            // the turn of its journal
	Entry string    `json:"entry,omitempty"` // its entry in that journal; "": none to look for
	Until time.Time `json:"until,omitzero"`  // when its last question expires; zero: never
}

// heldEntry is the key, under the suspended invocation's own part of the
// journal, of the entry that keeps the expert held.
const heldEntry = "held"

// holdFor returns the hold that a call under ctx, ended with err, leaves on
// the expert: nil unless the call was suspended under a journal. It
// records the hold's entry in the call's journal when that journal is kept
// in st (nil: any store), so that whoever checks the hold in st finds it.
func holdFor(ctx context.Context, err error, st *store.Store, by string) *hold {
	var in *tool.Interrupted
	js := journalFrom(ctx)
	if by == "" || js == nil || !errors.As(err, &in) {
		return nil
	}
	h := &hold{By: by, Turn: js.J.Turn()}
	for _, it := range in.Interrupts {
		if it.ExpiresAt.IsZero() {
			h.Until = time.Time{}
			break
		}
		if it.ExpiresAt.After(h.Until) {
			h.Until = it.ExpiresAt
		}
	}
	if st == nil || stored.Store(js) == st {
		key := js.Prefix + heldEntry
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if js.J.Record(wctx, key, journal.Entry{Content: "a call suspended for a person's answer holds this resident expert"}) == nil {
			h.Entry = key
		}
		// Without the entry the hold lasts until the call resumes or its
		// questions expire.
	}
	return h
}

// live reports whether h still holds the expert: some question it waits
// for has not expired, and its turn's journal, read from st, still has its
// entry. A journal that cannot be read is taken to hold it.
func (h *hold) live(ctx context.Context, st *store.Store) bool {
	if !h.Until.IsZero() && !time.Now().Before(h.Until) {
		return false
	}
	if h.Entry == "" || st == nil {
		return true
	}
	_, err := st.JournalEntry(ctx, h.Turn, h.Entry)
	return !errors.Is(err, store.ErrNotFound)
}

// errHeld: the resident is held for another, suspended call.
var errHeld = errors.New("subagent: held for a call suspended until a person answers")

// residentPause is the hold on a resident expert without WithStore.
type residentPause struct {
	mu    sync.Mutex
	h     *hold
	st    *store.Store  // the store of h's journal
	freed chan struct{} // closed when h lets go
}

// take admits the call under ctx, or fails with errHeld while the expert
// is held for another call (a hold that is no longer live is let go
// first). The returned function ends the call's turn with its error: it
// holds the expert for the call if it was suspended, and lets it go when
// the call that held it ended otherwise.
func (p *residentPause) take(ctx context.Context, me string) (end func(error) error, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h != nil && p.h.By != me {
		if p.h.live(ctx, p.st) {
			return nil, errHeld
		}
		p.letGo()
	}
	return func(err error) error { p.after(ctx, err, me); return nil }, nil
}

// freedChan returns a channel closed when the current hold lets go, or nil.
func (p *residentPause) freedChan() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.freed
}

// after holds the expert for the call under ctx if it ended suspended
// (err), and lets it go when the call that held it ended otherwise.
func (p *residentPause) after(ctx context.Context, err error, me string) {
	if me == "" {
		return
	}
	h := holdFor(ctx, err, nil, me)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case h != nil:
		if p.h == nil {
			p.freed = make(chan struct{})
		}
		p.h, p.st = h, stored.Store(journalFrom(ctx))
	case p.h != nil && p.h.By == me:
		p.letGo()
	}
}

func (p *residentPause) letGo() {
	p.h, p.st = nil, nil
	close(p.freed)
	p.freed = nil
}

// heldWait is a caller's wait for a resident held for a suspended call.
type heldWait struct{ delay time.Duration }

// wait waits a while for t's resident to be let go (or refuses the call,
// with WithRefuseWhenBusy): in this process it is woken when the hold
// ends; a hold in the store, which another process may end, is looked at
// again after a delay that grows to a second.
func (w *heldWait) wait(ctx context.Context, t *SubAgentTool) error {
	name := t.def.Name
	if t.cfg.refuseBusy {
		return tool.Correctable(fmt.Errorf("%w: %q is waiting for a person's answer to an earlier call: ask again later, or do without it", ErrBusy, name))
	}
	w.delay = min(max(2*w.delay, 20*time.Millisecond), time.Second)
	timer := time.NewTimer(w.delay)
	defer timer.Stop()
	select {
	case <-t.pause.freedChan(): // nil for a hold in the store
	case <-timer.C:
	case <-ctx.Done():
		return w.gaveUp(ctx, name)
	}
	return nil
}

// waited reports whether the caller has waited for a held resident.
func (w *heldWait) waited() bool { return w.delay > 0 }

// gaveUp is the error of a caller whose context ended while it waited for
// a held resident.
func (w *heldWait) gaveUp(ctx context.Context, name string) error {
	return fmt.Errorf("subagent %q: waiting for an earlier call, suspended until a person answers, to resume: %w", name, context.Cause(ctx))
}
