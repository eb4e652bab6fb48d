package subagent

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/postgres"
)

// postgresStores returns n stores over the test server, each with its own
// connections, as n replicas of a service would have; or skips.
func postgresStores(t *testing.T, n int) []*store.Store {
	t.Helper()
	dsn := os.Getenv("DEPUTY_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("DEPUTY_TEST_POSTGRES is not set: set it to a PostgreSQL DSN whose database the tests may empty (.ci/postgres.sh starts one)")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `DROP TABLE IF EXISTS deputy_schema, deputy_records, deputy_leases`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
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
