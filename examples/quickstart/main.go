// Command quickstart is deputy's tour: a ReAct agent that uses a tool, on the
// scripted fake provider, so it runs with no key and no network.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/tool"
)

type weatherArgs struct {
	City string `json:"city" jsonschema:"description=the city to report on"`
}

func main() {
	weather := tool.Must(tool.New("weather", "Reports the weather in a city.",
		func(ctx context.Context, in weatherArgs) (string, error) {
			return "sunny, 21°C in " + in.City, nil
		}))

	model := fake.NewProvider(
		fake.Call("weather", `{"city":"Lisbon"}`),
		fake.Text("It is sunny and 21°C in Lisbon."),
	)
	fmt.Println("provider: fake (scripted replies)")

	a, err := agent.NewReact(model, agent.WithName("assistant"), agent.WithTools(weather))
	if err != nil {
		log.Fatal(err)
	}
	out, err := a.Run(context.Background(), agent.Input{Text: "What's the weather in Lisbon?"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("answer:", out.Answer)
	fmt.Println("usage: ", out.TotalUsage())
}
