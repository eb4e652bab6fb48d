package pick_test

import (
	"context"
	"fmt"
	"log"

	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/provider"
)

// An example program picks its provider first and says which it is.
func ExampleProvider() {
	fake := provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage("scripted answer")}, nil
	})
	// Provider reads the process environment; FromEnv lets this example
	// pretend nothing is set.
	p, desc, err := pick.FromEnv(func(string) string { return "" }, fake)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(desc)
	resp, _ := p.Complete(context.Background(), provider.Request{Messages: []provider.Message{provider.UserMessage("hi")}})
	fmt.Println(resp.Message.Content)
	// Output:
	// provider: fake (set DEPUTY_PROVIDER=openai|anthropic to use a real model)
	// scripted answer
}

// Pointing OPENAI_BASE_URL at a local server such as Ollama picks it, with
// no API key.
func ExampleFromEnv_ollama() {
	env := map[string]string{
		"OPENAI_BASE_URL": "http://localhost:11434/v1",
		"OPENAI_MODEL":    "qwen3",
	}
	_, desc, err := pick.FromEnv(func(k string) string { return env[k] }, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(desc)
	// Output:
	// provider: openai (qwen3 at http://localhost:11434/v1)
}
