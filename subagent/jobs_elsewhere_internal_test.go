package subagent

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
)

// stalled is a backend whose reads hang, while stall is set, until their
// context ends.
type stalled struct {
	store.Backend
	stall atomic.Bool
}

func (b *stalled) Get(ctx context.Context, key string) (store.Item, error) {
	if b.stall.Load() {
		<-ctx.Done()
		return store.Item{}, ctx.Err()
	}
	return b.Backend.Get(ctx, key)
}

// The status of a job another process runs reads its record again, and a
// read that hangs gives up at elsewhereRead, the status showing what the
// last read found.
func TestElsewhereStatusReadIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &stalled{Backend: memory.New()}
		st, err := store.New(b)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		js := &jobStore{st: st, h: "h"}
		put := func(r jobRecord) {
			raw, _ := json.Marshal(r)
			if err := st.Put(context.Background(), js.key(r.ID), raw, store.AnyVersion); err != nil {
				t.Fatal(err)
			}
		}
		rec := jobRecord{ID: "job_1", State: JobRunning, Step: 3, LastWords: "digging", Usage: provider.Usage{InputTokens: 7, Requests: 2}}
		put(rec)
		got := JobStatus{ID: "job_1"}
		js.elsewhereStatus(&got)
		if !got.Elsewhere || got.Step != 3 || got.LastWords != "digging" || got.Usage != rec.Usage {
			t.Fatalf("the status reads %+v, want the record's step 3, last words and usage %+v, elsewhere", got, rec.Usage)
		}
		rec.Step, rec.Usage = 4, provider.Usage{InputTokens: 9, Requests: 3}
		put(rec)
		b.stall.Store(true)
		start := time.Now()
		got = JobStatus{ID: "job_1"}
		js.elsewhereStatus(&got)
		if waited := time.Since(start); waited != elsewhereRead {
			t.Errorf("a read that hangs held the status %v, want %v", waited, elsewhereRead)
		}
		if !got.Elsewhere || got.Step != 3 || got.Usage.InputTokens != 7 {
			t.Errorf("after a read that hung the status reads %+v, want what the last read found (step 3)", got)
		}
		b.stall.Store(false)
		got = JobStatus{ID: "job_1"}
		js.elsewhereStatus(&got)
		if got.Step != 4 || got.Usage != rec.Usage {
			t.Errorf("once the store answers again the status reads %+v, want step 4 and usage %+v", got, rec.Usage)
		}
	})
}
