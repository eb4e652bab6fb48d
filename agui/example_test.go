package agui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/subagent"
)

// A lead agent that hands a task to a sub-agent, served over AG-UI: the
// client POSTs a RunAgentInput and reads the run's events as they happen.
func Example() {
	model := fake.NewProvider(
		fake.Call("researcher", `{"task":"Is the sky blue?"}`).For("lead"),
		fake.Text("Yes.").For("researcher"),
		fake.Text("The researcher says yes.").For("lead"),
	)
	researcher, err := subagent.FromFactory("researcher", "Researches a question.",
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(model, agent.WithName("researcher"))
		})
	if err != nil {
		log.Fatal(err)
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(researcher))
	if err != nil {
		log.Fatal(err)
	}
	h, err := agui.New(lead)
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	body := `{"threadId":"thread-1","runId":"run-1","messages":[{"id":"m1","role":"user","content":"Is the sky blue?"}]}`
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Header.Get("Content-Type"))

	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue // the blank line that ends each frame
		}
		var e event.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			log.Fatal(err)
		}
		who := "lead"
		if e.SubagentRunID != "" {
			who = "  researcher"
		}
		switch e.Type {
		case event.RunStarted:
			fmt.Println(e.Type, e.ThreadID, e.RunID)
		case event.RunFinished:
			fmt.Println(e.Type, e.ThreadID, e.RunID, string(e.Result))
		case event.SubagentStarted:
			fmt.Println(e.Type, e.Name)
		case event.TextMessageContent, event.ToolCallArgs:
			fmt.Printf("%s %s %q\n", who, e.Type, e.Delta)
		case event.ToolCallResult:
			fmt.Printf("%s %s %q\n", who, e.Type, e.Content)
		case event.Custom:
			fmt.Println(who, e.Type, e.Name)
		default:
			fmt.Println(who, e.Type)
		}
	}
	// Output:
	// text/event-stream
	// RUN_STARTED thread-1 run-1
	// lead STEP_STARTED
	// lead TOOL_CALL_START
	// lead TOOL_CALL_ARGS "{\"task\":\"Is t"
	// lead TOOL_CALL_ARGS "he sky blue?\"}"
	// lead TOOL_CALL_END
	// lead CUSTOM deputy.usage
	// SUBAGENT_STARTED researcher
	//   researcher STEP_STARTED
	//   researcher TEXT_MESSAGE_START
	//   researcher TEXT_MESSAGE_CONTENT "Yes."
	//   researcher TEXT_MESSAGE_END
	//   researcher CUSTOM deputy.usage
	//   researcher STEP_FINISHED
	//   researcher SUBAGENT_FINISHED
	// lead TOOL_CALL_RESULT "Yes."
	// lead STEP_FINISHED
	// lead STEP_STARTED
	// lead TEXT_MESSAGE_START
	// lead TEXT_MESSAGE_CONTENT "The "
	// lead TEXT_MESSAGE_CONTENT "researcher "
	// lead TEXT_MESSAGE_CONTENT "says "
	// lead TEXT_MESSAGE_CONTENT "yes."
	// lead TEXT_MESSAGE_END
	// lead CUSTOM deputy.usage
	// lead STEP_FINISHED
	// RUN_FINISHED thread-1 run-1 "The researcher says yes."
}
