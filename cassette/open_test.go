package cassette_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/internal/bigtree"
)

// record is -deputy.record: go test -run TestTheStoredTree -deputy.record='*'
// records testdata/tree.jsonl again.
var recordFlag = cassette.RecordFlag()

func TestTheStoredTreeReplays(t *testing.T) {
	live := &bigtree.Model{IDs: bigtree.IDsRestart}
	p := cassette.Open(t, "testdata/tree.jsonl", live, *recordFlag)
	got, err := runTree(t, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *recordFlag == "" && live.Calls.Load() != 0 {
		t.Errorf("replaying called the model %d times", live.Calls.Load())
	}
	const want = "Report on 4 results: 154 bytes"
	if got.out.Answer != want {
		t.Errorf("answer %q, want %q", got.out.Answer, want)
	}
}

func TestARecordingIsTheSameFileWhateverTheOrderOfTheCalls(t *testing.T) {
	var files [3][]byte
	for i := range files {
		c, _, _ := record(t, bigtree.IDsNone)
		var b bytes.Buffer
		if err := c.Write(&b); err != nil {
			t.Fatal(err)
		}
		files[i] = b.Bytes()
	}
	if !bytes.Equal(files[0], files[1]) || !bytes.Equal(files[0], files[2]) {
		t.Fatal("three recordings of the same tree differ")
	}
}

func TestOpenRecordsThenReplays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "tree.jsonl")
	live := &bigtree.Model{IDs: bigtree.IDsFresh}
	t.Run("record", func(t *testing.T) {
		p := cassette.Open(t, path, live, "*")
		if _, err := runTree(t, p, nil); err != nil {
			t.Fatal(err)
		}
	})
	calls := live.Calls.Load()
	if _, err := os.Stat(path); err != nil || calls == 0 {
		t.Fatalf("the recording was not saved (%v), or made no call (%d)", err, calls)
	}
	t.Run("replay", func(t *testing.T) {
		p := cassette.Open(t, path, nil, "")
		if _, err := runTree(t, p, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("rerecord one node", func(t *testing.T) {
		p := cassette.Open(t, path, live, "lead/researcher@1.1/analyst@1.3")
		if _, err := runTree(t, p, nil); err != nil {
			t.Fatal(err)
		}
	})
	if got := live.Calls.Load() - calls; got != 1 {
		t.Errorf("re-recording one node called the model %d times, want 1", got)
	}
	c, err := cassette.Load(path)
	if err != nil || int64(c.Len()) != calls {
		t.Fatalf("after re-recording: %d calls (%v), want %d", c.Len(), err, calls)
	}
}
