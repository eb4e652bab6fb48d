package anthropic_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
)

// TestRetries: a server that refuses the connection or whose host does
// not resolve fails the first call within seconds, with an error that
// names the URL and how to set it; a failing server is tried again for
// no longer than the retry time; each retry is logged and emitted.
func TestRetries(t *testing.T) {
	wiretest.Retries(t, wiretest.Retrier{
		New: func(t *testing.T, baseURL string, client *http.Client, log *slog.Logger, retryTime time.Duration) provider.Provider {
			clearEnv(t)
			opts := []anthropic.Option{
				anthropic.WithBaseURL(strings.TrimSuffix(baseURL, "/v1")), // the SDK adds /v1
				anthropic.WithAPIKey("sk-ant-test"),
				anthropic.WithHTTPClient(client),
				anthropic.WithLogger(log),
			}
			if retryTime != 0 {
				opts = append(opts, anthropic.WithRetryTime(retryTime))
			}
			p, err := anthropic.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		EnvVar:      "ANTHROPIC_BASE_URL",
		ServerError: `{"type":"error","error":{"type":"api_error","message":"the server had an error"}}`,
		Request:     weatherRequest(),
	})
}
