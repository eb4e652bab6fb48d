// Package postgres is the store.Backend for several processes or machines
// sharing state: a PostgreSQL database, through pgx.
//
//	b, err := postgres.Open(ctx, "postgres://deputy@db/deputy")
//	if err != nil { ... }
//	st, err := store.New(b)
//
// Open creates its three tables (deputy_schema, deputy_records,
// deputy_leases) when missing and migrates them, one process at a time
// under an advisory lock. Leases run on the database's clock, so the
// machines' clocks need not agree.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deputy-go/deputy/store"
)

// Backend is a store.Backend over a PostgreSQL database. Build it with Open.
type Backend struct {
	pool *pgxpool.Pool
	host string
}

// migrations are the schema's versions: migrations[i] takes it from version
// i to i+1. A database at a version past the list was made by a newer
// program and is refused.
var migrations = []string{
	`CREATE TABLE deputy_records (
		key     TEXT COLLATE "C" PRIMARY KEY,
		value   BYTEA NOT NULL,
		version BIGINT NOT NULL
	);
	CREATE TABLE deputy_leases (
		key     TEXT COLLATE "C" PRIMARY KEY,
		owner   TEXT NOT NULL,
		expires TIMESTAMPTZ NOT NULL
	);`,
}

// migrationLock is the advisory lock key under which one process migrates.
const migrationLock = 0x64657075747931 // "deputy1"

// Open connects to the database named by dsn (a URL or key=value string, as
// pgx reads it) and brings the schema up to date. An unreachable server
// fails with store.ErrUnavailable; a schema newer than this program knows,
// with store.ErrSchemaTooNew.
func Open(ctx context.Context, dsn string) (*Backend, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: the DSN: %w: pass a URL such as postgres://user@host/db or key=value pairs", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	b := &Backend{pool: pool, host: fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port)}
	if err := b.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return b, nil
}

func (b *Backend) migrate(ctx context.Context) error {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return b.wrap(ctx, "connecting", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
		return b.wrap(ctx, "locking the schema", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS deputy_schema (version INTEGER NOT NULL)`); err != nil {
		return b.wrap(ctx, "creating the schema table", err)
	}
	var version int
	switch err := tx.QueryRow(ctx, `SELECT version FROM deputy_schema`).Scan(&version); {
	case errors.Is(err, pgx.ErrNoRows):
		if _, err := tx.Exec(ctx, `INSERT INTO deputy_schema (version) VALUES (0)`); err != nil {
			return b.wrap(ctx, "creating the schema", err)
		}
	case err != nil:
		return b.wrap(ctx, "reading the schema version", err)
	}
	if version > len(migrations) {
		return fmt.Errorf("%w: the database at %s has schema version %d, this program knows up to %d: run a newer deputy",
			store.ErrSchemaTooNew, b.host, version, len(migrations))
	}
	for i := version; i < len(migrations); i++ {
		if _, err := tx.Exec(ctx, migrations[i]); err != nil {
			return b.wrap(ctx, fmt.Sprintf("migrating the schema to version %d", i+1), err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE deputy_schema SET version = $1`, len(migrations)); err != nil {
		return b.wrap(ctx, "recording the schema version", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return b.wrap(ctx, "migrating", err)
	}
	return nil
}

// wrap names the server; an error that is not the server's answer (no
// connection, a timeout) while ctx is live is store.ErrUnavailable.
func (b *Backend) wrap(ctx context.Context, doing string, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) && ctx.Err() == nil {
		return fmt.Errorf("%w: postgres at %s: %s: %w: check that the server runs and that the DSN names it",
			store.ErrUnavailable, b.host, doing, err)
	}
	return fmt.Errorf("postgres at %s: %s: %w", b.host, doing, err)
}

// Get implements store.Backend.
func (b *Backend) Get(ctx context.Context, key string) (store.Item, error) {
	it := store.Item{Key: key}
	err := b.pool.QueryRow(ctx, `SELECT value, version FROM deputy_records WHERE key = $1`, key).Scan(&it.Value, &it.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Item{}, fmt.Errorf("%w: %q", store.ErrNotFound, key)
	}
	if err != nil {
		return store.Item{}, b.wrap(ctx, "reading "+key, err)
	}
	return it, nil
}

// keyEnd is above every valid UTF-8 continuation of a prefix, in the "C"
// collation's byte order.
const keyEnd = "\U0010FFFF"

// List implements store.Backend.
func (b *Backend) List(ctx context.Context, prefix string) ([]store.Item, error) {
	rows, err := b.pool.Query(ctx, `SELECT key, value, version FROM deputy_records WHERE key >= $1 AND key < $2 ORDER BY key`, prefix, prefix+keyEnd)
	if err != nil {
		return nil, b.wrap(ctx, "listing "+prefix, err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Item, error) {
		var it store.Item
		err := r.Scan(&it.Key, &it.Value, &it.Version)
		return it, err
	})
	if err != nil {
		return nil, b.wrap(ctx, "listing "+prefix, err)
	}
	return items, nil
}

// Keys implements store.Backend.
func (b *Backend) Keys(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	// One lower bound, so that the index seeks to the page.
	q, lo := `SELECT key FROM deputy_records WHERE key >= $1 AND key < $2 ORDER BY key LIMIT $3`, prefix
	if after >= prefix {
		q, lo = `SELECT key FROM deputy_records WHERE key > $1 AND key < $2 ORDER BY key LIMIT $3`, after
	}
	rows, err := b.pool.Query(ctx, q, lo, prefix+keyEnd, limit)
	if err != nil {
		return nil, b.wrap(ctx, "listing "+prefix, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, b.wrap(ctx, "listing "+prefix, err)
	}
	return keys, nil
}

// Put implements store.Backend: one transaction for all the writes.
func (b *Backend) Put(ctx context.Context, writes ...store.Write) error {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return b.wrap(ctx, "writing", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	for _, w := range writes {
		if w.Fence == nil {
			continue
		}
		// FOR SHARE keeps the lease row as it is until the commit: another
		// holder's Lease waits for it.
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM deputy_leases WHERE key = $1 AND owner = $2 AND expires >= clock_timestamp() FOR SHARE`, w.Fence.Key, w.Fence.Owner).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: the lease on %q is no longer %s's", store.ErrLockLost, w.Fence.Key, w.Fence.Owner)
		}
		if err != nil {
			return b.wrap(ctx, "checking the lease on "+w.Fence.Key, err)
		}
	}
	for _, w := range writes {
		v := w.Value
		if v == nil {
			v = []byte{}
		}
		var tag pgconn.CommandTag
		switch w.Version {
		case store.AnyVersion:
			tag, err = tx.Exec(ctx, `INSERT INTO deputy_records (key, value, version) VALUES ($1, $2, 1)
				ON CONFLICT (key) DO UPDATE SET value = excluded.value, version = deputy_records.version + 1`, w.Key, v)
		case 0:
			tag, err = tx.Exec(ctx, `INSERT INTO deputy_records (key, value, version) VALUES ($1, $2, 1) ON CONFLICT (key) DO NOTHING`, w.Key, v)
		default:
			tag, err = tx.Exec(ctx, `UPDATE deputy_records SET value = $1, version = version + 1 WHERE key = $2 AND version = $3`, v, w.Key, w.Version)
		}
		if err != nil {
			return b.wrap(ctx, "writing "+w.Key, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%w: %q is not at version %d: read it again", store.ErrConflict, w.Key, w.Version)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return b.wrap(ctx, "committing", err)
	}
	return nil
}

// Delete implements store.Backend.
func (b *Backend) Delete(ctx context.Context, keys ...string) error {
	if _, err := b.pool.Exec(ctx, `DELETE FROM deputy_records WHERE key = ANY($1)`, keys); err != nil {
		return b.wrap(ctx, "deleting", err)
	}
	return nil
}

// Lease implements store.Backend, on the database's clock.
func (b *Backend) Lease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	tag, err := b.pool.Exec(ctx, `INSERT INTO deputy_leases (key, owner, expires)
		VALUES ($1, $2, clock_timestamp() + $3 * interval '1 microsecond')
		ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires = excluded.expires
		WHERE deputy_leases.owner = excluded.owner OR deputy_leases.expires < clock_timestamp()`,
		key, owner, ttl.Microseconds())
	if err != nil {
		return false, b.wrap(ctx, "leasing "+key, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Release implements store.Backend.
func (b *Backend) Release(ctx context.Context, key, owner string) error {
	if _, err := b.pool.Exec(ctx, `DELETE FROM deputy_leases WHERE key = $1 AND owner = $2`, key, owner); err != nil {
		return b.wrap(ctx, "releasing "+key, err)
	}
	return nil
}

// Close closes the connections.
func (b *Backend) Close() error {
	b.pool.Close()
	return nil
}
