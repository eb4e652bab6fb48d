package sqlite_test

import (
	"path/filepath"
	"testing"

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
