package cassette_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/internal/bigtree"
	"github.com/deputy-go/deputy/provider"
)

// A tree recorded through an Admission that lets one call go at a time,
// so that the 16 parallel analysts of a researcher wait their turns,
// replays with no model and no Admission: the same tree, answer, usage
// and approved tools' runs.
func TestATreeRecordedThroughAnAdmissionReplays(t *testing.T) {
	adm, err := provider.NewAdmission(provider.WithLimits("", provider.Limits{InFlight: 1}))
	if err != nil {
		t.Fatal(err)
	}
	live := &bigtree.Model{IDs: bigtree.IDsFresh}
	// Each call holds its place a while, so that the analysts started
	// at once wait for it.
	slow := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		time.Sleep(5 * time.Millisecond)
		return live.Complete(ctx, req)
	})
	admitted := provider.Admit(slow, adm)
	var queued atomic.Int64
	rec := cassette.Record(provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		resp, err := admitted.Complete(ctx, req)
		if resp.Queued > 0 {
			queued.Add(1)
		}
		return resp, err
	}))
	want, err := runTree(t, rec, nil)
	if err != nil {
		t.Fatalf("recording: %v", err)
	}
	if queued.Load() == 0 {
		t.Fatal("no call waited for the admission: the test does not record through one")
	}
	c, err := rec.Cassette()
	if err != nil {
		t.Fatal(err)
	}
	if int64(c.Len()) != live.Calls.Load() {
		t.Fatalf("the cassette holds %d calls, the model answered %d", c.Len(), live.Calls.Load())
	}
	p := cassette.Replay(c)
	got, err := runTree(t, p, nil)
	if err != nil || len(p.Misses()) > 0 {
		t.Fatalf("replaying: %v (%d misses)", err, len(p.Misses()))
	}
	if got.dump != want.dump {
		t.Errorf("the replayed tree differs:\n%s\nrecorded:\n%s", got.dump, want.dump)
	}
	if got.out.Answer != want.out.Answer || got.out.Usage != want.out.Usage || got.out.ChildUsage != want.out.ChildUsage {
		t.Errorf("replayed %q %+v %+v, recorded %q %+v %+v", got.out.Answer, got.out.Usage, got.out.ChildUsage, want.out.Answer, want.out.Usage, want.out.ChildUsage)
	}
	if got.asked != want.asked || got.ran != want.ran || got.ran != [2]int64{1, 1} {
		t.Errorf("replayed: %d approvals asked, tools ran %v; recorded %d, %v", got.asked, got.ran, want.asked, want.ran)
	}
}
