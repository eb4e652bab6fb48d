package cassette_test

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/deputy-go/deputy/cassette"
)

// Whatever a cassette file holds, Read fails with ErrBadCassette or reads
// a cassette that writes back to a file it reads the same.
func FuzzRead(f *testing.F) {
	seed, err := os.ReadFile("../treetest/internal/review/testdata/review.jsonl")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{"cassette":1,"entries":0}` + "\n"))
	f.Add([]byte("{}\n{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := cassette.Read(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, cassette.ErrBadCassette) {
				t.Fatalf("not an ErrBadCassette: %v", err)
			}
			return
		}
		var once, twice bytes.Buffer
		if err := c.Write(&once); err != nil {
			t.Fatal(err)
		}
		c2, err := cassette.Read(bytes.NewReader(once.Bytes()))
		if err != nil {
			t.Fatalf("a cassette read and written back does not read: %v", err)
		}
		if err := c2.Write(&twice); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(once.Bytes(), twice.Bytes()) || c2.Len() != c.Len() {
			t.Fatal("a cassette written, read and written again differs")
		}
	})
}
