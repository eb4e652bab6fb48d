package subagent

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/postgres"
	"github.com/deputy-go/deputy/store/postgres/pgtest"
)

// postgresStores returns n stores over the test server, each with its own
// connections, as n replicas of a service would have; or skips.
func postgresStores(t *testing.T, n int) []*store.Store {
	t.Helper()
	dsn := pgtest.DSN(t, "deputy_test_subagent")
	ctx := context.Background()
	var out []*store.Store
	for range n {
		b, err := postgres.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.New(b, store.WithLeaseTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		out = append(out, st)
	}
	return out
}

func TestStoredExpertReplicasOnPostgres(t *testing.T) {
	stores := postgresStores(t, 2)
	var wg sync.WaitGroup
	for r, st := range stores {
		wg.Go(func() {
			ex := storedExpert(t, (&echo{}).provider(), st)
			for i := range 10 {
				if _, err := callTool(context.Background(), ex, "c", fmt.Sprintf(`{"task":"r%d-%s"}`, r, strconv.Itoa(i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	msgs, version := storedMessages(t, stores[0])
	if len(msgs) != 40 || version != 20 {
		t.Fatalf("stored %d messages at version %d after 20 calls, want 40 at 20", len(msgs), version)
	}
	seen := map[string]bool{}
	for i := 0; i < 40; i += 2 {
		q, a := msgs[i], msgs[i+1]
		if a.Content != "A:"+q.Content || seen[q.Content] {
			t.Fatalf("turn %d is %q → %q: turns interleaved or repeated", i/2, q.Content, a.Content)
		}
		seen[q.Content] = true
	}
}
