// Package pgtest gives tests a PostgreSQL database of their own: the server
// named by DEPUTY_TEST_POSTGRES, in a schema the test empties, so that the
// tests of several packages can share one server at the same time.
package pgtest

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Env is the variable that names the test server, as a pgx DSN.
const Env = "DEPUTY_TEST_POSTGRES"

// DSN returns a DSN of the test server whose tables live in the schema
// named schema, created empty; or skips the test when Env is unset.
func DSN(t testing.TB, schema string) string {
	t.Helper()
	dsn := os.Getenv(Env)
	if dsn == "" {
		t.Skip(Env + " is not set: set it to a PostgreSQL DSN where tests may create schemas (.ci/postgres.sh starts a throwaway server)")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("%s: %v", Env, err)
	}
	defer conn.Close(ctx)
	id := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+id+` CASCADE; CREATE SCHEMA `+id); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " search_path=" + schema
}
