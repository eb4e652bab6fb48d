package pick_test

import (
	"context"
	"fmt"
	"log"

	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/provider"
)

// An example program picks its provider first and says which it is. Its
// main passes os.Getenv; here nothing is set.
func ExampleFromEnv() {
	fake := provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage("scripted answer")}, nil
	})
	p, desc, err := pick.FromEnv(func(string) string { return "" }, fake)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(desc)
	resp, _ := p.Complete(context.Background(), provider.Request{Messages: []provider.Message{provider.UserMessage("hi")}})
	fmt.Println(resp.Message.Content)
	// Output:
	// provider: fake (scripted replies; docs/providers.md tells how to use a real one)
	// scripted answer
}
