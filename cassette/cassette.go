package cassette

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/deputy-go/deputy/provider"
)

// Version is the version of the cassette format this package writes and
// reads: the "cassette" field of a file's first line.
const Version = 1

// Bounds on a cassette read from a file (Load, Read): a cassette is input
// from outside the program, which a hand edit or a bad merge may have
// broken.
const (
	// MaxBytes bounds a whole cassette.
	MaxBytes = 64 << 20
	// MaxLineBytes bounds one entry.
	MaxLineBytes = 8 << 20
	// MaxEntries bounds the number of entries.
	MaxEntries = 100_000
)

// ErrBadCassette is the error of a cassette that cannot be read: a line
// that is not JSON, a file cut short, one over a bound, an entry whose
// hash does not match the request it holds, two entries for one call.
var ErrBadCassette = errors.New("cassette: bad cassette")

// Entry is one recorded model call: a line of the file.
type Entry struct {
	// Position is the call's place in the tree (see Position), and Step
	// its order among the calls made at that position, from 0.
	Position string `json:"position"`
	Step     int    `json:"step"`
	// Hash is Request's hash (Request.Hash).
	Hash    string  `json:"hash"`
	Request Request `json:"request"`
	// Model is the model the call asked for, as the request named it.
	Model string `json:"model,omitempty"`
	// Response is what the model answered; Error, when not empty, is the
	// error the call failed with instead.
	Response Response `json:"response"`
	Error    string   `json:"error,omitempty"`
}

// Response is a model's answer as a cassette keeps it.
type Response struct {
	Content    string              `json:"content,omitempty"`
	ToolCalls  []ToolCall          `json:"tool_calls,omitempty"`
	StopReason provider.StopReason `json:"stop_reason,omitempty"`
	Model      string              `json:"model,omitempty"`
	Usage      provider.Usage      `json:"usage"`
}

func fromResponse(r provider.Response) Response {
	out := Response{Content: r.Message.Content, StopReason: r.StopReason, Model: r.Model, Usage: r.Usage}
	for _, c := range r.Message.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: c.ID, Name: c.Name, Arguments: string(c.Arguments)})
	}
	return out
}

func (r *Response) response() provider.Response {
	msg := provider.AssistantMessage(r.Content)
	if len(r.ToolCalls) > 0 {
		msg.ToolCalls = make([]provider.ToolCall, len(r.ToolCalls))
		for i, c := range r.ToolCalls {
			msg.ToolCalls[i] = provider.ToolCall{ID: c.ID, Name: c.Name, Arguments: json.RawMessage(c.Arguments)}
		}
	}
	return provider.Response{Message: msg, StopReason: r.StopReason, Model: r.Model, Usage: r.Usage}
}

// Cassette is a set of recorded model calls, keyed by their place in the
// tree and the hash of their request. It does not change once built, and
// is safe for concurrent use: one Cassette serves any number of Replay
// providers at once.
type Cassette struct {
	entries []Entry          // sorted by position, then step
	byPos   map[string][]int // position -> indexes in entries, by step
	// provider is the name of the provider the calls were recorded from.
	provider string
}

// header is a cassette file's first line.
type header struct {
	Cassette int    `json:"cassette"`
	Entries  int    `json:"entries"`
	Provider string `json:"provider,omitempty"`
}

// newCassette builds a cassette of entries, sorted; it fails when two
// entries are the same call.
func newCassette(entries []Entry) (*Cassette, error) {
	slices.SortStableFunc(entries, func(a, b Entry) int {
		if c := strings.Compare(a.Position, b.Position); c != 0 {
			return c
		}
		return a.Step - b.Step
	})
	c := &Cassette{entries: entries, byPos: map[string][]int{}}
	for i := range entries {
		e := &entries[i]
		if i > 0 && entries[i-1].Position == e.Position && entries[i-1].Step == e.Step {
			return nil, fmt.Errorf("%w: two entries for step %d at %q: keep one, or re-record the cassette", ErrBadCassette, e.Step, e.Position)
		}
		c.byPos[e.Position] = append(c.byPos[e.Position], i)
	}
	return c, nil
}

// Len returns the number of recorded calls.
func (c *Cassette) Len() int { return len(c.entries) }

// Provider returns the name of the provider the calls were recorded
// from ("" when it had none).
func (c *Cassette) Provider() string { return c.provider }

// Entries returns the recorded calls, sorted by position, then step.
func (c *Cassette) Entries() []Entry { return slices.Clone(c.entries) }

// Load reads the cassette in the file at path (see Read).
func Load(path string) (*Cassette, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cassette: %w: record it first (see Open)", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > MaxBytes {
		return nil, fmt.Errorf("%s: %w: larger than %d bytes: split the test into smaller trees", path, ErrBadCassette, MaxBytes)
	}
	c, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Read reads a cassette: a first line {"cassette":1,"entries":n}, then one
// Entry a line. It reads at most MaxBytes, a line of at most MaxLineBytes
// and MaxEntries entries, and checks that each entry's hash is its
// request's; any failure is an ErrBadCassette saying which line is wrong.
func Read(r io.Reader) (*Cassette, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cassette: reading: %w", err)
	}
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes: split the test into smaller trees", ErrBadCassette, MaxBytes)
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty: record it first", ErrBadCassette)
	}
	if data[len(data)-1] != '\n' {
		return nil, fmt.Errorf("%w: line %d: cut short (no newline at its end): the file was truncated; re-record it", ErrBadCassette, bytes.Count(data, []byte{'\n'})+1)
	}
	var entries []Entry
	var h header
	for n := 1; len(data) > 0; n++ {
		i := bytes.IndexByte(data, '\n')
		line := data[:i]
		data = data[i+1:]
		if len(line) > MaxLineBytes {
			return nil, fmt.Errorf("%w: line %d: longer than %d bytes", ErrBadCassette, n, MaxLineBytes)
		}
		if n == 1 {
			if err := strictUnmarshal(line, &h); err != nil || h.Cassette == 0 {
				return nil, fmt.Errorf("%w: line 1 is not a cassette header ({\"cassette\":%d,...}): re-record it", ErrBadCassette, Version)
			}
			if h.Cassette != Version {
				return nil, fmt.Errorf("%w: version %d, this package reads version %d: re-record it", ErrBadCassette, h.Cassette, Version)
			}
			if h.Entries < 0 || h.Entries > MaxEntries {
				return nil, fmt.Errorf("%w: the header counts %d entries, more than the %d a cassette may hold", ErrBadCassette, h.Entries, MaxEntries)
			}
			entries = make([]Entry, 0, min(h.Entries, bytes.Count(data, []byte{'\n'})))
			continue
		}
		if len(entries) == MaxEntries {
			return nil, fmt.Errorf("%w: more than %d entries", ErrBadCassette, MaxEntries)
		}
		var e Entry
		if err := strictUnmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadCassette, n, err)
		}
		if err := check(&e); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadCassette, n, err)
		}
		entries = append(entries, e)
	}
	if h.Entries != len(entries) {
		return nil, fmt.Errorf("%w: the header counts %d entries and the file holds %d: it was cut short or edited; re-record it", ErrBadCassette, h.Entries, len(entries))
	}
	c, err := newCassette(entries)
	if err != nil {
		return nil, err
	}
	c.provider = h.Provider
	return c, nil
}

func strictUnmarshal(line []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("more than one JSON value on the line")
	}
	return nil
}

// check reports what is wrong with an entry read from outside.
func check(e *Entry) error {
	switch {
	case e.Position == "":
		return errors.New("an entry without a position")
	case e.Step < 0:
		return fmt.Errorf("step %d is negative", e.Step)
	case e.Request.Messages == nil:
		return fmt.Errorf("the entry for %q has no request", e.Position)
	}
	if got := e.Request.Hash(); got != e.Hash {
		return fmt.Errorf("the hash of step %d at %q is %q, and its request hashes to %q: the entry was edited by hand; re-record it", e.Step, e.Position, e.Hash, got)
	}
	return nil
}

// Write writes c to w in the form Read reads: a header line, then one
// entry a line, sorted by position and step, so that a re-recorded
// cassette differs from the old one only where the calls did.
func (c *Cassette) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(header{Cassette: Version, Entries: len(c.entries), Provider: c.provider}); err != nil {
		return err
	}
	for i := range c.entries {
		if err := enc.Encode(&c.entries[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// Save writes c to the file at path, creating its directory; the file is
// replaced whole or not at all.
func (c *Cassette) Save(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("cassette: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("cassette: %w", err)
	}
	werr := f.Chmod(0o644)
	if werr == nil {
		werr = c.Write(f)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("cassette: writing %s: %w", path, werr)
	}
	return nil
}
