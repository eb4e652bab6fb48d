package openai_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/openai"
)

// fakeOpenAI stands in for api.openai.com or a local server such as Ollama:
// it answers every request with body.
func fakeOpenAI(status int, contentType, body string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
}

func Example() {
	srv := fakeOpenAI(200, "application/json", `{"id":"chatcmpl-1","object":"chat.completion","created":1741569952,
		"model":"qwen3","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help?"},
		"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":6,"total_tokens":18}}`)
	defer srv.Close()

	// Against a local server, such as Ollama at http://localhost:11434/v1,
	// no API key is needed.
	p, err := openai.New(openai.WithBaseURL(srv.URL), openai.WithModel("qwen3"))
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
	srv := fakeOpenAI(200, "text/event-stream", ""+
		`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`+"\n\n"+
		`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{"content":"lo!"},"finish_reason":"stop"}]}`+"\n\n"+
		`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`+"\n\n"+
		"data: [DONE]\n\n")
	defer srv.Close()

	p, err := openai.New(openai.WithBaseURL(srv.URL), openai.WithModel("qwen3"))
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

// Failures are *provider.Error values: branch on the kind, and find the
// SDK's own error in the chain when more detail is needed.
func ExampleProvider_Complete_errors() {
	srv := fakeOpenAI(429, "application/json",
		`{"error":{"message":"Rate limit reached.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
	defer srv.Close()

	p, err := openai.New(openai.WithBaseURL(srv.URL), openai.WithAPIKey("sk-example"), openai.WithMaxRetries(0))
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
	// rate limit 429 true
	// openai: rate limit (HTTP 429): Rate limit reached. (slow down or raise the provider's max retries)
}

func ExampleNew_badOption() {
	_, err := openai.New(openai.WithMaxRetries(-1))
	fmt.Println(err)
	// Output:
	// openai: WithMaxRetries(-1): the count cannot be negative; pass 0 to disable retries
}
