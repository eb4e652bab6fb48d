package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/tool"
)

type weatherArgs struct {
	City string `json:"city" jsonschema:"description=the city to report on"`
}

func weatherTool() tool.Tool {
	return tool.Must(tool.New("weather", "Reports the weather in a city.",
		func(ctx context.Context, in weatherArgs) (string, error) {
			return "sunny, 21°C in " + in.City, nil
		}))
}

// A ReAct agent calls a tool, reads its result and answers.
func ExampleNewReact() {
	model := fake.NewProvider(
		fake.Call("weather", `{"city":"Lisbon"}`),
		fake.Text("It is sunny and 21°C in Lisbon."),
	)
	a, err := agent.NewReact(model,
		agent.WithName("assistant"),
		agent.WithSystemPrompt("Answer in one sentence."),
		agent.WithTools(weatherTool()),
	)
	if err != nil {
		panic(err)
	}
	out, err := a.Run(context.Background(), agent.Input{Text: "What's the weather in Lisbon?"})
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Answer)
	for _, m := range out.Messages {
		fmt.Printf("%-9s %q %d\n", m.Role, m.Content, len(m.ToolCalls))
	}
	fmt.Println(out.Usage)
	// Output:
	// It is sunny and 21°C in Lisbon.
	// user      "What's the weather in Lisbon?" 0
	// assistant "" 1
	// tool      "sunny, 21°C in Lisbon" 0
	// assistant "It is sunny and 21°C in Lisbon." 0
	// 2 req, 129 in, 14 out
}

// A React keeps its conversation across runs; a failed run leaves it as it
// was.
func ExampleReact_Run_conversation() {
	model := fake.NewProvider(
		fake.Text("Nice to meet you, Ana."),
		fake.Text("Your name is Ana."),
	)
	a, err := agent.NewReact(model)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, q := range []string{"I am Ana.", "What is my name?", "And my age?"} {
		out, err := a.Run(ctx, agent.Input{Text: q})
		if errors.Is(err, fake.ErrScriptExhausted) {
			fmt.Println("failed; history still has", len(a.History()), "messages")
			continue
		}
		fmt.Println(out.Answer)
	}
	// Output:
	// Nice to meet you, Ana.
	// Your name is Ana.
	// failed; history still has 4 messages
}

// The model's mistakes reach it as error results it can correct; the retry
// budget turns repeated failure into an error.
func ExampleWithToolRetries() {
	model := fake.NewProvider(
		fake.Call("weather", `{"town":"Lisbon"}`),
		fake.Call("weather", `{"city":"Lisbon"}`),
		fake.Text("Sunny in Lisbon."),
	)
	a, err := agent.NewReact(model, agent.WithTools(weatherTool()), agent.WithToolRetries(1))
	if err != nil {
		panic(err)
	}
	out, err := a.Run(context.Background(), agent.Input{Text: "Weather in Lisbon?"})
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Messages[2].Content)
	fmt.Println(out.Answer)
	// Output:
	// tool: invalid arguments for weather: at the top level: additional properties 'town' not allowed; at the top level: missing property 'city': fix the arguments to match the tool's schema and call it again
	// Sunny in Lisbon.
}

// Snapshot and Restore carry a conversation across a restart.
func ExampleReact_Snapshot() {
	model := fake.NewProvider(fake.Text("Noted: the meeting is on Friday."), fake.Text("On Friday."))
	before, _ := agent.NewReact(model)
	if _, err := before.Run(context.Background(), agent.Input{Text: "The meeting is on Friday."}); err != nil {
		panic(err)
	}
	saved, err := before.Snapshot()
	if err != nil {
		panic(err)
	}

	after, _ := agent.NewReact(model)
	if err := after.Restore(saved); err != nil {
		panic(err)
	}
	out, err := after.Run(context.Background(), agent.Input{Text: "When is the meeting?"})
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Answer, len(after.History()))

	fmt.Println(after.Restore([]byte(`{"version":2,"messages":[{"role":"tool","tool_call_id":"x"}]}`)))
	// Output:
	// On Friday. 4
	// agent: invalid conversation snapshot: message 0: tool result for "x" answers no pending call: pass only what Snapshot returned
}

// With a sink in the context, a run reports what happens as AG-UI events;
// a provider that streams delivers the text in pieces.
func ExampleReact_Run_events() {
	model := fake.NewProvider(
		fake.Call("weather", `{"city":"Lisbon"}`),
		fake.Text("Sunny in Lisbon."),
	)
	a, err := agent.NewReact(model, agent.WithTools(weatherTool()))
	if err != nil {
		panic(err)
	}
	var line []string
	sink := event.SinkFunc(func(e event.Event) {
		switch e.Type {
		case event.TextMessageContent, event.ToolCallArgs:
			line = append(line, fmt.Sprintf("%s(%q)", e.Type, e.Delta))
		case event.Custom:
			line = append(line, fmt.Sprintf("%s(%s)", e.Type, e.Name))
		default:
			line = append(line, string(e.Type))
		}
	})
	ctx := event.WithSink(context.Background(), sink)
	if _, err := a.Run(ctx, agent.Input{Text: "Weather in Lisbon?"}); err != nil {
		panic(err)
	}
	fmt.Println(strings.Join(line, "\n"))
	// Output:
	// RUN_STARTED
	// STEP_STARTED
	// TOOL_CALL_START
	// TOOL_CALL_ARGS("{\"city\":")
	// TOOL_CALL_ARGS("\"Lisbon\"}")
	// TOOL_CALL_END
	// CUSTOM(deputy.usage)
	// TOOL_CALL_RESULT
	// STEP_FINISHED
	// STEP_STARTED
	// TEXT_MESSAGE_START
	// TEXT_MESSAGE_CONTENT("Sunny ")
	// TEXT_MESSAGE_CONTENT("in ")
	// TEXT_MESSAGE_CONTENT("Lisbon.")
	// TEXT_MESSAGE_END
	// CUSTOM(deputy.usage)
	// STEP_FINISHED
	// RUN_FINISHED
}

// Anything with a Run method is an Agent; Func makes one of a function.
func ExampleFunc() {
	var echo agent.Agent = agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		return agent.Output{Answer: "you said: " + in.Text}, nil
	})
	out, _ := echo.Run(context.Background(), agent.Input{Text: "hi"})
	fmt.Println(out.Answer)
	// Output: you said: hi
}

// A tool learns which run it serves from its context: the agent's name,
// and its depth in a delegation tree (0 at the top; a sub-agent tool runs
// its child one deeper).
func ExampleDepth() {
	whoami := tool.Func{
		Def: tool.Definition{Name: "whoami", Description: "Tells who is asking.", Parameters: []byte(`{"type":"object"}`)},
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
			return tool.Result{Content: fmt.Sprintf("agent %s at depth %d", agent.Name(ctx), agent.Depth(ctx))}, nil
		},
	}
	model := fake.NewProvider(fake.Call("whoami", `{}`), fake.Text("done"))
	a, _ := agent.NewReact(model, agent.WithName("planner"), agent.WithTools(whoami))
	out, err := a.Run(context.Background(), agent.Input{Text: "who?"})
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Messages[2].Content)
	// Output: agent planner at depth 0
}

// A caller that makes two runs one logical call holds the agent's turn:
// nothing else runs between them, and on failure Rollback undoes exactly
// the call's own runs.
func ExampleReact_Hold() {
	model := fake.NewProvider(fake.Text("A draft."), fake.Text("Not what was asked."))
	a, err := agent.NewReact(model)
	if err != nil {
		panic(err)
	}
	ctx, turn, err := a.Hold(context.Background())
	if err != nil {
		panic(err)
	}
	defer turn.Release()
	first, _ := a.Run(ctx, agent.Input{Text: "Write a draft."})
	second, _ := a.Run(ctx, agent.Input{Text: "Now shorten it."})
	fmt.Println(first.Answer, "/", second.Answer)
	// The second answer is rejected: undo both runs.
	turn.Rollback()
	fmt.Println(len(a.History()), "messages kept")
	// Output:
	// A draft. / Not what was asked.
	// 0 messages kept
}

// An agent whose answer is a Go value: the schema of Review goes to the
// provider, the answer is checked and decoded, and an answer that does not
// fit is sent back once.
func ExampleOutputOf() {
	type Review struct {
		Verdict string   `json:"verdict" jsonschema:"enum=ship,enum=hold"`
		Notes   []string `json:"notes"`
	}
	model := fake.NewProvider(
		fake.Text(`{"verdict":"maybe"}`),
		fake.Text("```json\n{\"verdict\":\"hold\",\"notes\":[\"the migration has no rollback\"]}\n```"),
	)
	reviewer, err := agent.NewReact(model, agent.WithName("reviewer"), agent.OutputOf[Review]())
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := reviewer.Run(context.Background(), agent.Input{Text: "Review the change."})
	if err != nil {
		fmt.Println(err)
		return
	}
	r := out.Value.(Review)
	fmt.Printf("%s: %s (%d model calls)\n", r.Verdict, r.Notes[0], out.Usage.Requests)
	// Output:
	// hold: the migration has no rollback (2 model calls)
}

// WithLogger logs each model and tool call at Debug, and at Warn what only
// the model would otherwise see. (The example leaves out the times and the
// run id, which change from run to run.)
func ExampleWithLogger() {
	drop := func(_ []string, a slog.Attr) slog.Attr {
		switch a.Key {
		case slog.TimeKey, "run_id", "duration", "step_tools_duration":
			return slog.Attr{}
		}
		return a
	}
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: drop}))
	model := fake.NewProvider(fake.Text("Paris.")).Named("acme", "small")
	a, err := agent.NewReact(model, agent.WithName("geo"), agent.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := a.Run(context.Background(), agent.Input{Text: "Capital of France?"}); err != nil {
		log.Fatal(err)
	}
	// Output:
	// level=DEBUG msg="deputy: model call" agent=geo step=1 model=small input_tokens=5 output_tokens=2 tool_calls=0
	// level=DEBUG msg="deputy: run finished" agent=geo steps=1 tokens=7 child_tokens=0
}
