package openai_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
	"github.com/deputy-go/deputy/provider/openai"
)

// TestIdleTimeout: a stream that makes no progress for the idle timeout
// ends with an error that names the option; one that progresses does not.
func TestIdleTimeout(t *testing.T) {
	wiretest.IdleTimeout(t, wiretest.Wire{
		New: func(t *testing.T, client *http.Client, idle time.Duration) provider.Streamer {
			clearEnv(t)
			opts := []openai.Option{
				openai.WithBaseURL("http://model.test/v1"),
				openai.WithAPIKey("sk-test"),
				openai.WithMaxRetries(0),
				openai.WithHTTPClient(client),
			}
			if idle != 0 {
				opts = append(opts, openai.WithIdleTimeout(idle))
			}
			p, err := openai.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Request:   weatherRequest(),
		Text:      func(s string) string { return chunk(`{"content":` + strconv.Quote(s) + `}`) },
		KeepAlive: ": keep-alive\n\n",
		End:       `data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n",
	})
}
