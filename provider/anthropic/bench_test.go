package anthropic_test

import (
	"net/http"
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
	wiretest.AssemblyCost(b, func(b *testing.B, rt http.RoundTripper) provider.Streamer {
		p, err := anthropic.New(
			anthropic.WithBaseURL("http://model.test/"),
			anthropic.WithAPIKey("sk-test"),
			anthropic.WithMaxRetries(0),
			anthropic.WithMaxResponseBytes(1<<30),
			anthropic.WithMaxTextBytes(8<<20),
			anthropic.WithMaxArgumentBytes(8<<20),
			anthropic.WithHTTPClient(&http.Client{Transport: rt}),
		)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}, wiretest.Generated{
		Head: messageStart + textStart(0), Unit: textDelta(0, "abcd"), Tail: blockStop(0) + messageEnd,
	}, wiretest.Generated{
		Head: messageStart + toolStart(0, "toolu_1", "spawn"), Unit: argsDelta(0, "abcd"), Tail: blockStop(0) + messageEnd,
	})
}
