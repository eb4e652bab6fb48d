package openai_test

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
	"github.com/deputy-go/deputy/provider/openai"
)

// TestRetries: a server that refuses the connection or whose host does
// not resolve fails the first call within seconds, with an error that
// names the URL and how to set it; a failing server is tried again for
// no longer than the retry time; each retry is logged and emitted.
func TestRetries(t *testing.T) {
	wiretest.Retries(t, wiretest.Retrier{
		New: func(t *testing.T, baseURL string, client *http.Client, log *slog.Logger, retryTime time.Duration) provider.Provider {
			clearEnv(t)
			opts := []openai.Option{
				openai.WithBaseURL(baseURL),
				openai.WithAPIKey("sk-test"),
				openai.WithHTTPClient(client),
				openai.WithLogger(log),
			}
			if retryTime != 0 {
				opts = append(opts, openai.WithRetryTime(retryTime))
			}
			p, err := openai.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		EnvVar:      "OPENAI_BASE_URL",
		ServerError: `{"error":{"message":"the server had an error","type":"server_error"}}`,
		Request:     weatherRequest(),
	})
}
