package store_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
)

// TestNewRejectsBadOptions: a bad option value fails New with an error that
// names the package and says what to pass; a nil option is ignored.
func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  store.Option
		want string
	}{
		{store.WithMaxRecordBytes(100), "store: max record 100 bytes: use at least 1024"},
		{store.WithLeaseTTL(time.Millisecond), "store: lease TTL 1ms: use at least 100ms"},
	} {
		b, err := sqlite.Open(filepath.Join(t.TempDir(), "deputy.db"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.New(b, tc.opt); err == nil || err.Error() != tc.want {
			t.Errorf("error %v, want %q", err, tc.want)
		}
		b.Close()
	}
	b, err := sqlite.Open(filepath.Join(t.TempDir(), "deputy.db"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(b, nil, store.WithLeaseTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
}
