package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Backend {
		b, err := sqlite.Open(filepath.Join(t.TempDir(), "deputy.db"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// TestOpenRejectsBadOptions: a bad option value fails Open with an error
// that names the package and says what to pass; a nil option is ignored.
func TestOpenRejectsBadOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deputy.db")
	if _, err := sqlite.Open(path, sqlite.WithBusyTimeout(-time.Second)); err == nil || err.Error() != "sqlite: busy timeout -1s: use zero or more" {
		t.Errorf("Open with a negative busy timeout: %v", err)
	}
	b, err := sqlite.Open(path, nil, sqlite.WithBusyTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
}
