package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A resident expert remembers earlier calls: the second question builds on
// the first answer.
func ExampleFromAgent() {
	model := fake.NewProvider(
		fake.Call("historian", `{"task":"When was the Eiffel Tower built?"}`).For("lead"),
		fake.Call("historian", `{"task":"And how tall was it then?"}`).For("lead"),
		fake.Text("Built 1887-1889; 300 m tall at the time.").For("lead"),
		fake.Text("From 1887 to 1889.").For("historian"),
		fake.Text("It was 300 m tall when it opened in 1889.").For("historian"),
	)
	historian, err := agent.NewReact(model, agent.WithName("historian"),
		agent.WithSystemPrompt("You are a historian of Paris."))
	if err != nil {
		log.Fatal(err)
	}
	consult, err := subagent.FromAgent("historian", "Answers questions on the history of Paris; remembers the conversation.", historian)
	if err != nil {
		log.Fatal(err)
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(consult))
	if err != nil {
		log.Fatal(err)
	}
	out, err := lead.Run(context.Background(), agent.Input{Text: "Tell me about the Eiffel Tower."})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("answer:", out.Answer)
	fmt.Println("the historian remembers", len(historian.History()), "messages")
	fmt.Println("lead:", out.Usage)
	fmt.Println("historian:", out.ChildUsage)
	// Output:
	// answer: Built 1887-1889; 300 m tall at the time.
	// the historian remembers 4 messages
	// lead: 3 req, 266 in, 35 out
	// historian: 2 req, 42 in, 16 out
}

// A fresh agent per call, built from the call's arguments.
func ExampleFromFactory() {
	model := fake.NewProvider(
		fake.Text("Bonjour le monde").For("translator"),
	)
	translate, err := subagent.FromFactory("translate", "Translates text.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		var a struct{ To string }
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, err
		}
		return agent.NewReact(model, agent.WithName("translator"),
			agent.WithSystemPrompt("Translate the user's text into "+a.To+"."))
	}, subagent.WithInputFromArgs(func(args json.RawMessage) (agent.Input, error) {
		var a struct{ Text string }
		err := json.Unmarshal(args, &a)
		return agent.Input{Text: a.Text}, err
	}), subagent.WithParams(
		json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"},"to":{"type":"string"}},"required":["text","to"]}`)))
	if err != nil {
		log.Fatal(err)
	}
	res, err := translate.Call(context.Background(), tool.Call{ID: "call_1", Name: "translate", Arguments: json.RawMessage(`{"text":"Hello world","to":"French"}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Content)
	fmt.Println(model.Requests()[0].System)
	fmt.Println(res.Usage)
	// Output:
	// Bonjour le monde
	// Translate the user's text into French.
	// 1 req, 13 in, 4 out
}

// The model defines the sub-agent: its system prompt and its task.
func ExampleFromReact() {
	model := fake.NewProvider(
		fake.Call("delegate", `{"system_prompt":"You are a careful arithmetician.","task":"What is 17 * 23?"}`).For("lead"),
		fake.Text("17 * 23 = 391.").For("lead"),
		fake.Text("391").For("delegate"),
	)
	delegate, err := subagent.FromReact("delegate", "Runs a sub-agent you describe on a task.", model, nil)
	if err != nil {
		log.Fatal(err)
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(delegate))
	if err != nil {
		log.Fatal(err)
	}
	out, err := lead.Run(context.Background(), agent.Input{Text: "Compute 17 * 23."})
	if err != nil {
		log.Fatal(err)
	}
	child := model.RequestsFor("delegate")[0]
	fmt.Printf("child: system %q, task %q\n", child.System, child.Messages[0].Content)
	fmt.Println("answer:", out.Answer)
	fmt.Println("total:", out.TotalUsage())
	// Output:
	// child: system "You are a careful arithmetician.", task "What is 17 * 23?"
	// answer: 17 * 23 = 391.
	// total: 3 req, 192 in, 27 out
}

// WithReport checks the child's answer against ReportSchema, asking once
// more when it does not fit; Go callers get a Result.
func ExampleWithReport() {
	model := fake.NewProvider(
		fake.Text("I found two broken links.").For("auditor"),
		fake.Text("```json\n{\"status\":\"success\",\"summary\":\"2 broken links\",\"findings\":{\"broken\":2}}\n```").For("auditor"),
	)
	audit, err := subagent.FromReact("auditor", "Audits a web site.", model, nil, subagent.WithReport())
	if err != nil {
		log.Fatal(err)
	}
	res, err := audit.Call(context.Background(), tool.Call{ID: "call_1", Name: "auditor", Arguments: json.RawMessage(`{"task":"Check example.com for broken links."}`)})
	if err != nil {
		log.Fatal(err)
	}
	r := res.Value.(subagent.Report)
	fmt.Println("the model reads:", res.Content)
	fmt.Println("status:", r.Status, "| summary:", r.Summary, "| broken:", r.Findings["broken"])
	fmt.Println("usage, retry included:", res.Usage)
	// Output:
	// the model reads: {"status":"success","summary":"2 broken links","findings":{"broken":2}}
	// status: success | summary: 2 broken links | broken: 2
	// usage, retry included: 2 req, 481 in, 28 out
}

// OutputOf checks the answer against the schema of a Go type; Go callers get
// a value of that type.
func ExampleOutputOf() {
	type Forecast struct {
		City   string  `json:"city"`
		TempC  float64 `json:"temp_c"`
		Sunny  bool    `json:"sunny"`
		Source string  `json:"source,omitempty"`
	}
	model := fake.NewProvider(
		fake.Text(`Here you are: {"city":"Lisbon","temp_c":21.5,"sunny":true}`).For("weather"),
	)
	weather, err := subagent.FromReact("weather", "Forecasts the weather.", model, nil, subagent.OutputOf[Forecast]())
	if err != nil {
		log.Fatal(err)
	}
	res, err := weather.Call(context.Background(), tool.Call{ID: "call_1", Name: "weather", Arguments: json.RawMessage(`{"task":"Tomorrow in Lisbon?"}`)})
	if err != nil {
		log.Fatal(err)
	}
	f := res.Value.(Forecast)
	fmt.Println(res.Content)
	fmt.Printf("%s: %.1f°C, sunny %v\n", f.City, f.TempC, f.Sunny)
	// Output:
	// {"city":"Lisbon","temp_c":21.5,"sunny":true}
	// Lisbon: 21.5°C, sunny true
}

// A resident whose memory is scoped per thread: each conversation thread
// has its own expert, which remembers that thread's questions and nothing
// of any other's. A served agent gets the thread from the AG-UI handler;
// here agent.WithThread marks two threads by hand.
func ExampleFromScoped() {
	notes := map[string]*agent.React{}
	model := fake.NewProvider(
		fake.Call("notes", `{"task":"Remember: the launch is on Friday."}`).For("lead"),
		fake.Text("Noted.").For("lead"),
		fake.Call("notes", `{"task":"When is the launch?"}`).For("lead"),
		fake.Text("Asked.").For("lead"),
		fake.Text("Noted: Friday.").For("notes"),
		fake.Text("Nobody told me in this thread.").For("notes"),
	)
	consult, err := subagent.FromScoped("notes", "Keeps this thread's notes.", subagent.PerThread, func(thread string) (agent.Agent, error) {
		r, err := agent.NewReact(model, agent.WithName("notes"))
		notes[thread] = r
		return r, err
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, thread := range []string{"thread-a", "thread-b"} {
		lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(consult))
		if err != nil {
			log.Fatal(err)
		}
		if _, err := lead.Run(agent.WithThread(context.Background(), thread), agent.Input{Text: "Go on."}); err != nil {
			log.Fatal(err)
		}
		h := notes[thread].History()
		fmt.Printf("%s: %d messages, the last %q\n", thread, len(h), h[len(h)-1].Content)
	}
	// Output:
	// thread-a: 2 messages, the last "Noted: Friday."
	// thread-b: 2 messages, the last "Nobody told me in this thread."
}

// A Go caller keeps each child's typed value, its usage and its run id
// while the model reads the answer as it came.
func ExampleWithOutcome() {
	type Estimate struct {
		Task  string `json:"task"`
		Hours int    `json:"hours"`
	}
	model := fake.NewProvider(
		fake.Call("estimate", `{"task":"add a login page"}`).For("planner"),
		fake.Call("estimate", `{"task":"add a logout button"}`).For("planner"),
		fake.Text("About 7 hours in all.").For("planner"),
		fake.Text(`{"task":"login page","hours":6}`).For("estimator").WithUsage(provider.Usage{InputTokens: 40, OutputTokens: 9, Requests: 1}),
		fake.Text(`{"task":"logout button","hours":1}`).For("estimator").WithUsage(provider.Usage{InputTokens: 41, OutputTokens: 9, Requests: 1}),
	)
	var estimates []Estimate
	estimate, err := subagent.FromFactory("estimate", "Estimates the hours a task takes.",
		func(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(model, agent.WithName("estimator"))
		},
		subagent.OutputOf[Estimate](),
		subagent.WithOutcome(func(ctx context.Context, o subagent.Outcome) {
			if e, ok := o.Value.(Estimate); ok {
				estimates = append(estimates, e) // the planner's calls run one after the other
				fmt.Printf("%s: %+v, %v\n", o.RunID[:4], e, o.Usage)
			}
		}))
	if err != nil {
		log.Fatal(err)
	}
	planner, err := agent.NewReact(model, agent.WithName("planner"), agent.WithTools(estimate))
	if err != nil {
		log.Fatal(err)
	}
	out, err := planner.Run(context.Background(), agent.Input{Text: "How long for login and logout?"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(estimates), "estimates;", out.Answer)
	// Output:
	// sub_: {Task:login page Hours:6}, 1 req, 40 in, 9 out
	// sub_: {Task:logout button Hours:1}, 1 req, 41 in, 9 out
	// 2 estimates; About 7 hours in all.
}

// A Tree records what a run delegated: each invocation's arguments, state,
// model, usage per model and wall time, under the invocation that started
// it.
func ExampleTree() {
	lead := fake.NewProvider(
		fake.Call("reviewer", `{"task":"Review the retry change."}`).For("lead"),
		fake.Text("The change is sound.").For("lead"),
	).Named("acme", "large")
	small := fake.NewProvider(
		fake.Text("Sound: retries back off and stop after five.").WithUsage(provider.Usage{Requests: 1, InputTokens: 120, OutputTokens: 12}).For("reviewer"),
	).Named("acme", "small")
	reviewer, err := subagent.FromReact("reviewer", "Reviews a change.", small, nil)
	if err != nil {
		log.Fatal(err)
	}
	a, err := agent.NewReact(lead, agent.WithName("lead"), agent.WithTools(reviewer))
	if err != nil {
		log.Fatal(err)
	}
	tree := subagent.NewTree(nil)
	if _, err := a.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "Is the retry change sound?"}); err != nil {
		log.Fatal(err)
	}
	for _, n := range tree.Roots() {
		fmt.Printf("%s %s %s on %s\n", n.Name, n.Arguments, n.State, n.Model)
		for _, u := range n.Usage {
			fmt.Printf("  %s/%s: %d in, %d out\n", u.Provider, u.Model, u.Usage.InputTokens, u.Usage.OutputTokens)
		}
	}
	// Output:
	// reviewer {"task":"Review the retry change."} succeeded on small
	//   acme/small: 120 in, 12 out
}
