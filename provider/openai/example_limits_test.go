package openai_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/openai"
)

// A reply is untrusted input: the provider stops reading one that goes over
// a limit. Here a server streams more text than WithMaxTextBytes allows.
func ExampleWithMaxTextBytes() {
	var body strings.Builder
	for range 10 {
		body.WriteString(`data: {"choices":[{"index":0,"delta":{"content":"All work and no play. "}}]}` + "\n\n")
	}
	srv := fakeOpenAI(200, "text/event-stream", body.String())
	defer srv.Close()

	p, err := openai.New(openai.WithBaseURL(srv.URL), openai.WithAPIKey("sk-local"),
		openai.WithMaxTextBytes(64))
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
