package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
)

func TestNewerSchemaIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deputy.db")
	b, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE deputy_schema SET version = 99`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = sqlite.Open(path)
	if !errors.Is(err, store.ErrSchemaTooNew) || !strings.Contains(err.Error(), "99") {
		t.Fatalf("opening a database of schema 99: %v, want ErrSchemaTooNew naming the version", err)
	}
	// Opening again is the same error: nothing was rewritten.
	if _, err := sqlite.Open(path); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("second open: %v", err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deputy.db")
	st := open(t, path)
	msgs := []provider.Message{provider.UserMessage("q"), provider.AssistantMessage("a")}
	if err := st.SaveConversation(context.Background(), "expert", msgs, 0); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st = open(t, path)
	defer st.Close()
	c, err := st.Conversation(context.Background(), "expert")
	if err != nil || len(c.Messages) != 2 || c.Version != 1 {
		t.Fatalf("after reopening: %+v, %v", c, err)
	}
}

func open(t *testing.T, path string) *store.Store {
	t.Helper()
	b, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(b)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestCorruptedRowIsReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deputy.db")
	st := open(t, path)
	defer st.Close()
	ctx := context.Background()
	if err := st.SaveConversation(ctx, "expert", []provider.Message{provider.UserMessage("hello there")}, 0); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Another program edits the stored bytes behind the store's back.
	if _, err := db.Exec(`UPDATE deputy_records SET value = replace(value, 'hello', 'jello')`); err != nil {
		t.Fatal(err)
	}
	_, err = st.Conversation(ctx, "expert")
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "delete it") {
		t.Fatalf("reading an edited row: %v, want ErrCorrupt saying what to do", err)
	}
	// Deleting it is the way out.
	if err := st.DeleteConversation(ctx, "expert"); err != nil {
		t.Fatal(err)
	}
	if c, err := st.Conversation(ctx, "expert"); err != nil || len(c.Messages) != 0 {
		t.Fatalf("after deleting the damaged row: %+v, %v", c, err)
	}
}

func TestTruncatedFileIsReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deputy.db")
	st := open(t, path)
	ctx := context.Background()
	big := strings.Repeat("a long conversation ", 2000)
	for _, k := range []string{"a", "b", "c", "d"} {
		if err := st.SaveConversation(ctx, k, []provider.Message{provider.UserMessage(big + k)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	st.Close() // checkpoints the WAL into the file
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()/3); err != nil {
		t.Fatal(err)
	}
	b, err := sqlite.Open(path)
	if err == nil {
		st, _ := store.New(b)
		defer st.Close()
		for _, k := range []string{"a", "b", "c", "d"} {
			if _, err = st.Conversation(ctx, k); err != nil {
				break
			}
		}
	}
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "backup") {
		t.Fatalf("a truncated file: %v, want ErrCorrupt saying to restore or move the file", err)
	}
}

func TestNotADatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(path, []byte(strings.Repeat("not a database\n", 500)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(path); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("opening a text file: %v, want ErrCorrupt", err)
	}
}

func TestCorruptedJournalEntryIsReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deputy.db")
	st := open(t, path)
	defer st.Close()
	ctx := context.Background()
	j, err := st.Journal(ctx, "turn")
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Record(ctx, "child", store.Entry{Content: "an answer"}); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE deputy_records SET value = substr(value, 1, length(value) - 3)`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Journal(ctx, "turn"); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("opening a journal with a cut entry: %v, want ErrCorrupt", err)
	}
	if err := st.DeleteJournal(ctx, "turn"); err != nil {
		t.Fatal(err)
	}
	if j, err := st.Journal(ctx, "turn"); err != nil || j.Len() != 0 {
		t.Fatalf("after DeleteJournal: %v, %v", j, err)
	}
}
