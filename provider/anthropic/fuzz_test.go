package anthropic_test

import (
	"net/http"
	"testing"

	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
)

// FuzzStreamAssembly streams any body as a reply. Stream must not panic,
// must fail only with a *provider.Error, must deliver no text or arguments
// past the limits, and must return what it delivered.
func FuzzStreamAssembly(f *testing.F) {
	wiretest.AddSeeds(f)
	f.Add([]byte(messageStart + textStart(0) + textDelta(0, "a") + toolStart(1, "t", "f") + argsDelta(1, `{"x":`) + argsDelta(1, "1}") + messageEnd))
	const limit = 256
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := anthropic.New(
			anthropic.WithBaseURL("http://model.test/"),
			anthropic.WithAPIKey("sk-test"),
			anthropic.WithMaxRetries(0),
			anthropic.WithMaxResponseBytes(1<<16),
			anthropic.WithMaxTextBytes(limit),
			anthropic.WithMaxArgumentBytes(limit),
			anthropic.WithHTTPClient(&http.Client{Transport: wiretest.Generated{Head: string(body)}}),
		)
		if err != nil {
			t.Fatal(err)
		}
		wiretest.StreamAssembly(t, p, limit, wiretest.ArgumentsMayComeWithStart)
	})
}
