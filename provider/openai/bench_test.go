package openai_test

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
	"github.com/deputy-go/deputy/provider/openai"
)

const streamEnd = `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"

// BenchmarkStreamAssembly streams a reply of n deltas of 4 bytes each,
// text or one tool call's arguments, through Stream from an in-memory
// server, and reports the cost per delta: it must not grow with n. The
// cost includes the SDK's decoding of each event.
func BenchmarkStreamAssembly(b *testing.B) {
	kinds := []struct {
		name, head, unit string
	}{
		{"text", "", `data: {"choices":[{"index":0,"delta":{"content":"abcd"}}]}` + "\n\n"},
		{"arguments",
			`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"spawn","arguments":""}}]}}]}` + "\n\n",
			`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"abcd"}}]}}]}` + "\n\n"},
	}
	for _, k := range kinds {
		for _, n := range []int{10_000, 100_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/deltas=%d", k.name, n), func(b *testing.B) {
				p, err := openai.New(
					openai.WithBaseURL("http://model.test/v1"),
					openai.WithAPIKey("sk-test"),
					openai.WithMaxRetries(0),
					openai.WithMaxResponseBytes(1<<30),
					openai.WithMaxTextBytes(8<<20),
					openai.WithMaxArgumentBytes(8<<20),
					openai.WithHTTPClient(&http.Client{Transport: wiretest.Generated{Head: k.head, Unit: k.unit, Tail: streamEnd, N: n}}),
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
