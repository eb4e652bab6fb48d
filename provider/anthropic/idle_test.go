package anthropic_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
)

// TestIdleTimeout: a stream that makes no progress for the idle timeout
// ends with an error that names the option; one that progresses does not.
func TestIdleTimeout(t *testing.T) {
	wiretest.IdleTimeout(t, wiretest.Wire{
		New: func(t *testing.T, client *http.Client, idle time.Duration) provider.Streamer {
			clearEnv(t)
			opts := []anthropic.Option{
				anthropic.WithBaseURL("http://model.test/"),
				anthropic.WithAPIKey("sk-test"),
				anthropic.WithMaxRetries(0),
				anthropic.WithHTTPClient(client),
			}
			if idle != 0 {
				opts = append(opts, anthropic.WithIdleTimeout(idle))
			}
			p, err := anthropic.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Request:   weatherRequest(),
		Start:     messageStart + textStart(0),
		Text:      func(s string) string { return textDelta(0, s) },
		KeepAlive: ping,
		End:       blockStop(0) + messageEnd,
	})
}
