package anthropic_test

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
)

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
					anthropic.WithHTTPClient(&http.Client{Transport: wiretest.Generated{Head: k.head, Unit: k.unit, Tail: blockStop(0) + messageEnd, N: n}}),
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
