package providertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/providertest"
)

// A reply that answers becomes the Response a provider must return.
func ExampleReply_Response() {
	r := providertest.Reply{
		ToolCalls: []provider.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}},
		Usage:     provider.Usage{InputTokens: 60, OutputTokens: 15},
	}
	resp := r.Response()
	fmt.Println(resp.StopReason, resp.Message.ToolCalls[0].Name, resp.Usage)
	// Output:
	// tool_use get_weather 1 req, 60 in, 15 out
}

// Complete is the reference answer to a model call, for in-memory providers
// under test: a failure for a reply with a Status.
func ExampleComplete() {
	_, err := providertest.Complete(context.Background(), providertest.Reply{Status: 429})
	var perr *provider.Error
	if errors.As(err, &perr) {
		fmt.Println(perr.Kind, perr.StatusCode)
	}
	// Output:
	// rate limit 429
}

// Stream sends a reply in fragments, as a streaming model does, and
// returns the whole of it.
func ExampleStream() {
	r := providertest.Reply{Text: "Hello, world", Usage: provider.Usage{InputTokens: 3, OutputTokens: 2}}
	resp, err := providertest.Stream(context.Background(), r, func(d provider.Delta) error {
		fmt.Printf("%q\n", d.Text)
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("= %q\n", resp.Message.Content)
	// Output:
	// "Hello,"
	// " world"
	// = "Hello, world"
}
