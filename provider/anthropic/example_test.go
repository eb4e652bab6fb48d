package anthropic_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
)

// fakeAnthropic stands in for api.anthropic.com: it answers every request
// with body.
func fakeAnthropic(status int, contentType, body string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
}

func Example() {
	srv := fakeAnthropic(200, "application/json", `{"id":"msg_1","type":"message","role":"assistant",
		"model":"claude-sonnet-5-5","content":[{"type":"text","text":"Hello! How can I help?"}],
		"stop_reason":"end_turn","stop_sequence":null,
		"usage":{"input_tokens":12,"cache_read_input_tokens":0,"cache_creation_input_tokens":0,"output_tokens":6}}`)
	defer srv.Close()

	// Without WithAPIKey and WithBaseURL, the SDK reads ANTHROPIC_API_KEY
	// and ANTHROPIC_BASE_URL.
	p, err := anthropic.New(anthropic.WithBaseURL(srv.URL), anthropic.WithAPIKey("sk-ant-example"))
	if err != nil {
		log.Fatal(err)
	}
	resp, err := p.Complete(context.Background(), provider.Request{
		System:   "You are friendly.",
		Messages: []provider.Message{provider.UserMessage("Hi!")},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Message.Content)
	fmt.Println(resp.StopReason, resp.Usage)
	// Output:
	// Hello! How can I help?
	// end_turn 1 req, 12 in, 6 out
}

func ExampleProvider_Stream() {
	srv := fakeAnthropic(200, "text/event-stream", ""+
		"event: message_start\n"+`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-5-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":1}}}`+"\n\n"+
		"event: content_block_start\n"+`data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`+"\n\n"+
		"event: content_block_delta\n"+`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}`+"\n\n"+
		"event: content_block_delta\n"+`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo!"}}`+"\n\n"+
		"event: content_block_stop\n"+`data: {"type":"content_block_stop","index":0}`+"\n\n"+
		"event: message_delta\n"+`data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}`+"\n\n"+
		"event: message_stop\n"+`data: {"type":"message_stop"}`+"\n\n")
	defer srv.Close()

	p, err := anthropic.New(anthropic.WithBaseURL(srv.URL), anthropic.WithAPIKey("sk-ant-example"))
	if err != nil {
		log.Fatal(err)
	}
	req := provider.Request{Messages: []provider.Message{provider.UserMessage("Say hello.")}}
	resp, err := p.Stream(context.Background(), req, func(d provider.Delta) error {
		fmt.Printf("[%s]", d.Text)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("\n%s (%v)\n", resp.Message.Content, resp.Usage)
	// Output:
	// [Hel][lo!]
	// Hello! (1 req, 9 in, 2 out)
}

// An overloaded API (HTTP 529) is a transient failure: worth retrying later.
func ExampleProvider_Complete_errors() {
	srv := fakeAnthropic(529, "application/json",
		`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	defer srv.Close()

	p, err := anthropic.New(anthropic.WithBaseURL(srv.URL), anthropic.WithAPIKey("sk-ant-example"), anthropic.WithMaxRetries(0))
	if err != nil {
		log.Fatal(err)
	}
	_, err = p.Complete(context.Background(), provider.Request{Messages: []provider.Message{provider.UserMessage("Hi")}})
	var perr *provider.Error
	if errors.As(err, &perr) {
		fmt.Println(perr.Kind, perr.StatusCode, perr.Retryable())
	}
	fmt.Println(err)
	// Output:
	// transient 529 true
	// anthropic: transient (HTTP 529): Overloaded (retry later)
}

func ExampleNew_badOption() {
	_, err := anthropic.New(anthropic.WithMaxTokens(0))
	fmt.Println(err)
	// Output:
	// anthropic: WithMaxTokens(0): the cap must be positive; pass a token count such as 4096
}
