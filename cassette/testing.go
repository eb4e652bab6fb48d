package cassette

import (
	"errors"
	"flag"
	"io/fs"
	"testing"

	"github.com/deputy-go/deputy/provider"
)

// RecordFlag defines the flag -deputy.record on the program's command line
// (flag.CommandLine) and returns its value, for Open: "" replays, "*"
// records every call again, and a pattern of positions (see Rerecord)
// records again only the calls it matches. Call it once, in a test file's
// package-level var:
//
//	var record = cassette.RecordFlag()
//
// and run `go test -run TestTree -deputy.record='*'` to record.
func RecordFlag() *string {
	return flag.String("deputy.record", "", `record the cassettes again: "*" for every call, or a comma-separated list of position patterns (lead/critic@1.*) for the calls they match`)
}

// Open returns the provider a test runs its tree on: with record empty, a
// Replay of the cassette in the file at path, which reports each call it
// has no answer for on t at once (t.Error, with the call's position, what
// it asked and how it differs from the nearest recorded call) and fails
// the call; with record "*", or no file at path yet, a Record of every
// call through live; otherwise a Rerecord through live of the calls whose
// positions record matches, the rest replayed. A recording is written to
// path when the test ends, if it passed.
//
// The mode is chosen by the test (RecordFlag, or a literal), never by the
// environment: a test run without -deputy.record never reaches live, which
// may then be nil.
func Open(t testing.TB, path string, live provider.Provider, record string, opts ...Option) *Provider {
	t.Helper()
	report := WithMissHandler(func(m *MissError) { t.Error(m.Error()) })
	opts = append(opts[:len(opts):len(opts)], report)
	if record == "" {
		c, err := Load(path)
		if err != nil {
			t.Fatalf("%v (record it with -deputy.record='*')", err)
		}
		return Replay(c, opts...)
	}
	if live == nil {
		t.Fatalf("cassette: recording %s needs a live provider: pass one to Open", path)
	}
	var p *Provider
	c, err := Load(path)
	switch {
	case record == "*" || errors.Is(err, fs.ErrNotExist):
		p = Record(live, opts...)
	case err != nil:
		t.Fatalf("%v (record it whole with -deputy.record='*')", err)
	default:
		if p, err = Rerecord(c, live, record, opts...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cassette: the test failed: %s is left as it was", path)
			return
		}
		c, err := p.Cassette()
		if err == nil {
			err = c.Save(path)
		}
		if err != nil {
			t.Errorf("cassette: %v", err)
			return
		}
		t.Logf("cassette: %s: %d calls recorded, %d kept", path, p.LiveCalls(), c.Len()-p.LiveCalls())
	})
	return p
}
