package anthropic_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
)

// A reply is untrusted input: the provider stops reading one that goes over
// a limit. Here a server streams more text than WithMaxTextBytes allows.
// WithIdleTimeout bounds how long a stream may send nothing of the reply.
func ExampleWithMaxTextBytes() {
	body := messageStart + textStart(0) + strings.Repeat(textDelta(0, "All work and no play. "), 10) + messageEnd
	srv := fakeAnthropic(200, "text/event-stream", body)
	defer srv.Close()

	p, err := anthropic.New(anthropic.WithBaseURL(srv.URL), anthropic.WithAPIKey("sk-ant-local"),
		anthropic.WithMaxTextBytes(64), anthropic.WithIdleTimeout(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	var shown int
	_, err = p.Stream(context.Background(), provider.Request{
		Messages: []provider.Message{provider.UserMessage("Write forever.")},
	}, func(d provider.Delta) error {
		shown += len(d.Text)
		return nil
	})
	var perr *provider.Error
	if errors.As(err, &perr) && perr.Kind == provider.KindResponseTooLarge {
		fmt.Println("shown:", shown, "bytes")
		fmt.Println(perr.Message)
	}
	// Output:
	// shown: 44 bytes
	// the reply's text is over the limit of 64 bytes; the reply was not read further (the limit is set with WithMaxTextBytes)
}
