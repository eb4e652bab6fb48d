package anthropic_test

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
)

// generated is a response body of head, then unit n times, then tail,
// produced as it is read, so that a body of any size costs no memory.
type generated struct {
	parts [3]string
	n     int // repeats of parts[1] left
	off   int // offset into the current part
	part  int
}

func (g *generated) Read(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		if g.part == 1 && g.n == 0 {
			g.part, g.off = 2, 0
		}
		if g.part > 2 {
			break
		}
		s := g.parts[g.part]
		c := copy(p, s[g.off:])
		p, g.off, total = p[c:], g.off+c, total+c
		if g.off == len(s) {
			g.off = 0
			if g.part == 1 {
				g.n--
			} else {
				g.part++
			}
		}
	}
	if total == 0 {
		return 0, io.EOF
	}
	return total, nil
}

func (g *generated) Close() error { return nil }

// generatedServer answers every request with a fresh generated body.
type generatedServer struct {
	head, unit, tail string
	n                int
}

func (s generatedServer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": {"text/event-stream"}},
		Body:       &generated{parts: [3]string{s.head, s.unit, s.tail}, n: s.n},
		Request:    req,
	}, nil
}

// BenchmarkStreamAssembly streams a reply of n deltas of 4 bytes each,
// text or one tool call's arguments, through Stream from an in-memory
// server, and reports the cost per delta: it must not grow with n. The
// cost includes the SDK's decoding of each event.
func BenchmarkStreamAssembly(b *testing.B) {
	kinds := []struct {
		name, head, unit string
	}{
		{"text", messageStart + textStart(0), textDelta(0, "abcd")},
		{"arguments", messageStart + toolStart(0, "toolu_1", "spawn"), argsDelta(0, "abcd")},
	}
	for _, k := range kinds {
		for _, n := range []int{10_000, 100_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/deltas=%d", k.name, n), func(b *testing.B) {
				p, err := anthropic.New(
					anthropic.WithBaseURL("http://model.test/"),
					anthropic.WithAPIKey("sk-test"),
					anthropic.WithMaxRetries(0),
					anthropic.WithMaxResponseBytes(1<<30),
					anthropic.WithMaxTextBytes(8<<20),
					anthropic.WithMaxArgumentBytes(8<<20),
					anthropic.WithHTTPClient(&http.Client{Transport: generatedServer{head: k.head, unit: k.unit, tail: blockStop(0) + messageEnd, n: n}}),
				)
				if err != nil {
					b.Fatal(err)
				}
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
