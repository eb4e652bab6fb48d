//go:build realmodel

package pick_test

import (
	"context"
	"fmt"
	"log"

	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/provider"
)

// Built with -tags realmodel, pointing OPENAI_BASE_URL at a local server such
// as Ollama picks it, with no API key.
func ExampleFromEnv_ollama() {
	env := map[string]string{
		"OPENAI_BASE_URL": "http://localhost:11434/v1",
		"OPENAI_MODEL":    "qwen3",
	}
	fake := provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
		return provider.Response{}, nil
	})
	_, desc, err := pick.FromEnv(func(k string) string { return env[k] }, fake)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(desc)
	// Output:
	// provider: openai (qwen3 at http://localhost:11434/v1)
}
