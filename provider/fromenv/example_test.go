package fromenv_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/fromenv"
)

// A program passes os.Getenv; here a map stands in for the environment, and
// an httptest server speaking OpenAI's Chat Completions stands in for a local
// server such as Ollama at http://localhost:11434/v1.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1741569952,
			"model":"qwen3","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help?"},
			"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":6,"total_tokens":18}}`)
	}))
	defer srv.Close()
	env := map[string]string{
		"OPENAI_BASE_URL": srv.URL,
		"OPENAI_MODEL":    "qwen3",
	}

	model, _, err := fromenv.New(func(k string) string { return env[k] })
	if err != nil {
		log.Fatal(err)
	}
	resp, err := model.Complete(context.Background(), provider.Request{
		Messages: []provider.Message{provider.UserMessage("Hi!")},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Message.Content)
	// Output:
	// Hello! How can I help?
}

// The description names the provider and its model, and the server when it
// is not the vendor's own. New makes no network call.
func ExampleNew() {
	for _, env := range []map[string]string{
		{"DEPUTY_PROVIDER": "openai", "OPENAI_API_KEY": "sk-example"},
		{"DEPUTY_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "sk-ant-example", "ANTHROPIC_MODEL": "claude-haiku-5-5"},
		{"OPENAI_BASE_URL": "http://localhost:11434/v1", "OPENAI_MODEL": "qwen3"},
		{"OPENAI_BASE_URL": "http://localhost:11434/v1"},
	} {
		_, about, err := fromenv.New(func(k string) string { return env[k] })
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(about)
	}
	// Output:
	// provider: openai (gpt-5.4-mini)
	// provider: anthropic (claude-haiku-5-5)
	// provider: openai (qwen3 at http://localhost:11434/v1)
	// fromenv: OPENAI_BASE_URL=http://localhost:11434/v1 needs OPENAI_MODEL, a model that server serves (e.g. OPENAI_MODEL=qwen3 after ollama pull qwen3)
}

// A program with a provider of its own, such as a scripted one, uses it
// when the environment names none.
func ExampleNew_fallback() {
	scripted := provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage("scripted answer")}, nil
	})
	model, about, err := fromenv.New(func(string) string { return "" })
	if errors.Is(err, fromenv.ErrNoProvider) {
		model, about, err = scripted, "provider: scripted", nil
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(about)
	resp, err := model.Complete(context.Background(), provider.Request{Messages: []provider.Message{provider.UserMessage("Hi!")}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Message.Content)
	// Output:
	// provider: scripted
	// scripted answer
}
