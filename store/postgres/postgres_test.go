package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/postgres"
	"github.com/deputy-go/deputy/store/postgres/pgtest"
	"github.com/deputy-go/deputy/store/storetest"
)

// dsn returns the test server's DSN, in a schema of this package's own
// emptied for the test, or skips: .ci/run starts a throwaway server
// (.ci/postgres.sh) and sets DEPUTY_TEST_POSTGRES.
func dsn(t *testing.T) string {
	t.Helper()
	return pgtest.DSN(t, "deputy_test_store")
}

// empty drops the store's tables, so that each test starts from nothing.
func empty(t *testing.T, d string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `DROP TABLE IF EXISTS deputy_schema, deputy_records, deputy_leases`); err != nil {
		t.Fatal(err)
	}
}

func TestConformance(t *testing.T) {
	d := dsn(t)
	storetest.Run(t, func(t *testing.T) store.Backend {
		empty(t, d)
		b, err := postgres.Open(context.Background(), d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

func TestNewerSchemaIsRefused(t *testing.T) {
	d := dsn(t)
	empty(t, d)
	b, err := postgres.Open(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	conn, err := pgx.Connect(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `UPDATE deputy_schema SET version = 42`); err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(context.Background(), d)
	if !errors.Is(err, store.ErrSchemaTooNew) || !strings.Contains(err.Error(), "42") {
		t.Fatalf("opening a schema of version 42: %v, want ErrSchemaTooNew naming it", err)
	}
	empty(t, d)
}

func TestConcurrentOpensMigrateOnce(t *testing.T) {
	d := dsn(t)
	empty(t, d)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			b, err := postgres.Open(context.Background(), d)
			if err == nil {
				b.Close()
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// An unreachable server needs no DEPUTY_TEST_POSTGRES: nothing listens on
// port 1 of this machine.
func TestUnreachableServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := postgres.Open(ctx, "host=127.0.0.1 port=1 user=deputy dbname=deputy connect_timeout=2 sslmode=disable")
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "check that the server runs") {
		t.Fatalf("an unreachable server: %v, want ErrUnavailable saying what to check", err)
	}
	_, err = postgres.Open(ctx, "postgres://[bad")
	if err == nil || !strings.Contains(err.Error(), "DSN") {
		t.Fatalf("a malformed DSN: %v, want an error about the DSN", err)
	}
}
