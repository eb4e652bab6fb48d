package wiretest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/deputy-go/deputy/provider"
)

// AddSeeds adds the recorded streams testdata/responses/*.sse to f's corpus.
func AddSeeds(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "responses", "*.sse"))
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// Arguments says how a vendor's stream delivers a tool call's arguments.
type Arguments int

const (
	// ArgumentsInDeltas: a call's arguments come only in deltas, and a
	// call that got none has the arguments {}.
	ArgumentsInDeltas Arguments = iota
	// ArgumentsMayComeWithStart: a call's arguments may also come whole
	// with the call's start, without a delta.
	ArgumentsMayComeWithStart
)

// StreamAssembly streams a reply through p, whose text and argument limits
// are limit. Stream must not panic, must fail only with a *provider.Error,
// must deliver no text or arguments past the limits, and must return what
// it delivered.
func StreamAssembly(t *testing.T, p provider.Streamer, limit int, how Arguments) {
	var text int
	args := map[int]*bytes.Buffer{}
	resp, err := p.Stream(t.Context(), provider.Request{Messages: []provider.Message{provider.UserMessage("Hi.")}}, func(d provider.Delta) error {
		text += len(d.Text)
		if d.HasToolCall() {
			if args[d.ToolCall.Index] == nil {
				args[d.ToolCall.Index] = new(bytes.Buffer)
			}
			args[d.ToolCall.Index].WriteString(d.ToolCall.Arguments)
		}
		return nil
	})
	if text > limit {
		t.Fatalf("%d bytes of text delivered; the limit is %d", text, limit)
	}
	for i, a := range args {
		if a.Len() > limit {
			t.Fatalf("%d bytes of arguments delivered for call %d; the limit is %d", a.Len(), i, limit)
		}
	}
	if err != nil {
		var perr *provider.Error
		if !errors.As(err, &perr) {
			t.Fatalf("error %v (%T) is not a *provider.Error", err, err)
		}
		return
	}
	if len(resp.Message.Content) != text {
		t.Errorf("the reply has %d bytes of text; %d were delivered", len(resp.Message.Content), text)
	}
	for i, c := range resp.Message.ToolCalls {
		a := args[i]
		if how == ArgumentsMayComeWithStart && (a == nil || a.Len() == 0) {
			continue // the arguments, if any, came whole with the call's start
		}
		want := []byte("{}")
		if a != nil && len(bytes.TrimSpace(a.Bytes())) > 0 {
			want = a.Bytes()
			var buf bytes.Buffer
			if json.Compact(&buf, want) == nil {
				want = buf.Bytes()
			}
		}
		if !bytes.Equal(c.Arguments, want) {
			t.Errorf("call %d: arguments %q; delivered %q", i, c.Arguments, want)
		}
	}
}

// AssemblyCost streams replies of 10k, 100k and 1M deltas of 4 bytes
// ("abcd"), text and tool-call arguments, through the provider newProvider
// returns for a transport, and reports the cost per delta: it must not
// grow with the number of deltas. text and args are the replies, without
// their number of repeats.
func AssemblyCost(b *testing.B, newProvider func(b *testing.B, rt http.RoundTripper) provider.Streamer, text, args Generated) {
	for _, k := range []struct {
		name  string
		reply Generated
	}{{"text", text}, {"arguments", args}} {
		for _, n := range []int{10_000, 100_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/deltas=%d", k.name, n), func(b *testing.B) {
				reply := k.reply
				reply.N = n
				p := newProvider(b, reply)
				req := provider.Request{Messages: []provider.Message{provider.UserMessage("Write.")}}
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				b.ResetTimer()
				for b.Loop() {
					resp, err := p.Stream(b.Context(), req, func(provider.Delta) error { return nil })
					if err != nil {
						b.Fatal(err)
					}
					got := len(resp.Message.Content)
					if len(resp.Message.ToolCalls) == 1 {
						got = len(resp.Message.ToolCalls[0].Arguments)
					}
					if got != 4*n {
						b.Fatalf("assembled %d bytes; want %d", got, 4*n)
					}
				}
				b.StopTimer()
				runtime.ReadMemStats(&after)
				deltas := float64(b.N) * float64(n)
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/deltas, "ns/delta")
				b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/deltas, "B/delta")
				b.ReportMetric(float64(after.Mallocs-before.Mallocs)/deltas, "allocs/delta")
			})
		}
	}
}
