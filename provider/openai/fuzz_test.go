package openai_test

import (
	"net/http"
	"testing"

	"github.com/deputy-go/deputy/provider/internal/wiretest"
	"github.com/deputy-go/deputy/provider/openai"
)

// FuzzStreamAssembly streams any body as a reply. Stream must not panic,
// must fail only with a *provider.Error, must deliver no text or arguments
// past the limits, and must return what it delivered.
func FuzzStreamAssembly(f *testing.F) {
	wiretest.AddSeeds(f)
	f.Add([]byte(chunk(`{"content":"a"}`) + "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"arguments\":\"{\\\"x\\\":1\"}}]},\"finish_reason\":\"stop\"}]}\n\n"))
	const limit = 256
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := openai.New(
			openai.WithBaseURL("http://model.test/v1"),
			openai.WithAPIKey("sk-test"),
			openai.WithMaxRetries(0),
			openai.WithMaxResponseBytes(1<<16),
			openai.WithMaxTextBytes(limit),
			openai.WithMaxArgumentBytes(limit),
			openai.WithHTTPClient(&http.Client{Transport: wiretest.Generated{Head: string(body)}}),
		)
		if err != nil {
			t.Fatal(err)
		}
		wiretest.StreamAssembly(t, p, limit, wiretest.ArgumentsInDeltas)
	})
}
