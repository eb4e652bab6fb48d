package openai_test

import (
	"net/http"
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
	wiretest.AssemblyCost(b, func(b *testing.B, rt http.RoundTripper) provider.Streamer {
		p, err := openai.New(
			openai.WithBaseURL("http://model.test/v1"),
			openai.WithAPIKey("sk-test"),
			openai.WithMaxRetries(0),
			openai.WithMaxResponseBytes(1<<30),
			openai.WithMaxTextBytes(8<<20),
			openai.WithMaxArgumentBytes(8<<20),
			openai.WithHTTPClient(&http.Client{Transport: rt}),
		)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}, wiretest.Generated{
		Unit: `data: {"choices":[{"index":0,"delta":{"content":"abcd"}}]}` + "\n\n",
		Tail: streamEnd,
	}, wiretest.Generated{
		Head: `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"spawn","arguments":""}}]}}]}` + "\n\n",
		Unit: `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"abcd"}}]}}]}` + "\n\n",
		Tail: streamEnd,
	})
}
