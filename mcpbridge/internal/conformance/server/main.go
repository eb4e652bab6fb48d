// Command server serves deputy tools over MCP's streamable HTTP transport
// for the official MCP conformance suite's server scenarios
// (mcpbridge/conformance/README.md). It listens on 127.0.0.1, prints the
// endpoint URL as the first line of its output, and serves until SIGTERM
// or SIGINT.
//
// Each tool the suite calls is a deputy tool, served as any other:
//   - test_simple_text and test_error_handling: typed function tools;
//   - test_tool_with_progress and test_tool_with_logging: ReAct
//     sub-agents on the fake provider that call a lookup tool, whose
//     lifecycle events reach the client as progress and, the server being
//     built with WithLogNotifications, as log notifications;
//   - json_schema_2020_12_tool: a tool with a JSON Schema 2020-12
//     parameter schema, served as it is;
//   - test_elicitation, test_elicitation_sep1034_defaults and
//     test_elicitation_sep1330_enums: tools that ask a person with
//     tool.Ask, which the server turns into elicitation requests.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

func main() {
	srv, err := build()
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler(nil), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// asking is a tool that asks a person q (its message read from the
// arguments' "message" when q has none) and answers with what they said.
type asking struct {
	def    tool.Definition
	q      tool.Question
	answer string // the answer's prefix
}

func (a asking) Definition() tool.Definition { return a.def }

func (a asking) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	q := a.q
	if q.Message == "" {
		var in struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(call.Arguments, &in)
		q.Message = in.Message
	}
	got, err := tool.Ask(ctx, call, q)
	if err != nil {
		return tool.Result{}, err
	}
	return tool.Result{Content: a.answer + string(got)}, nil
}

// schemaTool is a tool whose parameters are a JSON Schema written out.
type schemaTool struct{ def tool.Definition }

func (s schemaTool) Definition() tool.Definition { return s.def }

func (s schemaTool) Call(context.Context, tool.Call) (tool.Result, error) {
	return tool.Result{Content: "ok"}, nil
}

func build() (*mcpbridge.Server, error) {
	simple := tool.Must(tool.New("test_simple_text", "Returns a simple text.", func(context.Context, struct{}) (string, error) {
		return "This is a simple text response for testing.", nil
	}))
	failing := tool.Must(tool.New("test_error_handling", "Always fails.", func(context.Context, struct{}) (string, error) {
		return "", errors.New("this tool intentionally returns an error for testing")
	}))
	lookup := tool.Must(tool.New("lookup", "Looks a fact up.", func(context.Context, struct {
		Q string `json:"q"`
	}) (string, error) {
		time.Sleep(50 * time.Millisecond) // as real work takes a while
		return "42", nil
	}))
	var workers []tool.Tool
	for _, name := range []string{"test_tool_with_progress", "test_tool_with_logging"} {
		model := fake.NewProvider(
			fake.Call("lookup", `{"q":"answer"}`).For(name),
			fake.Text("The answer is 42.").For(name),
		).Loop().DontRecord()
		w, err := subagent.FromFactory(name, "A sub-agent that looks a fact up and answers.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(model, agent.WithName(name), agent.WithTools(lookup))
		}, subagent.WithParams(json.RawMessage(`{"type":"object"}`)))
		if err != nil {
			return nil, err
		}
		workers = append(workers, w)
	}
	schema := schemaTool{tool.Definition{Name: "json_schema_2020_12_tool", Description: "Tool with JSON Schema 2020-12 features",
		Parameters: json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
			`"$defs":{"address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},` +
			`"properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"}},"additionalProperties":false}`)}}
	elicit := asking{
		def: tool.Definition{Name: "test_elicitation", Description: "Asks the user for their name and email.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}`)},
		q: tool.Question{ResponseSchema: json.RawMessage(`{"type":"object","properties":{"username":{"type":"string","description":"User's response"},` +
			`"email":{"type":"string","description":"User's email address"}},"required":["username","email"]}`)},
		answer: "User provided: ",
	}
	defaults := asking{
		def: tool.Definition{Name: "test_elicitation_sep1034_defaults", Description: "Asks with a default for each primitive type.", Parameters: json.RawMessage(`{"type":"object"}`)},
		q: tool.Question{Message: "Please review and update the form fields with defaults", ResponseSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"name":{"type":"string","description":"User name","default":"John Doe"},` +
			`"age":{"type":"integer","description":"User age","default":30},` +
			`"score":{"type":"number","description":"User score","default":95.5},` +
			`"status":{"type":"string","description":"User status","enum":["active","inactive","pending"],"default":"active"},` +
			`"verified":{"type":"boolean","description":"Verification status","default":true}}}`)},
		answer: "Elicitation completed: action=accept, content=",
	}
	enums := asking{
		def: tool.Definition{Name: "test_elicitation_sep1330_enums", Description: "Asks with each kind of enum.", Parameters: json.RawMessage(`{"type":"object"}`)},
		q: tool.Question{Message: "Please select options from the enum fields", ResponseSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"untitledSingle":{"type":"string","description":"Select one option","enum":["option1","option2","option3"]},` +
			`"titledSingle":{"type":"string","description":"Select one option with titles","oneOf":[{"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}]},` +
			`"legacyEnum":{"type":"string","description":"Select one option (legacy)","enum":["opt1","opt2","opt3"],"enumNames":["Option One","Option Two","Option Three"]},` +
			`"untitledMulti":{"type":"array","description":"Select multiple options","minItems":1,"items":{"type":"string","enum":["option1","option2","option3"]}},` +
			`"titledMulti":{"type":"array","description":"Select multiple options with titles","minItems":1,"items":{"anyOf":[{"const":"value1","title":"First Choice"},{"const":"value2","title":"Second Choice"},{"const":"value3","title":"Third Choice"}]}}}}`)},
		answer: "Elicitation completed: action=accept, content=",
	}
	srv := mcpbridge.NewServer("deputy-conformance", "1.0.0", mcpbridge.WithLogNotifications())
	for _, t := range append([]tool.Tool{simple, failing, schema, elicit, defaults, enums}, workers...) {
		if err := srv.AddTool(t); err != nil {
			return nil, err
		}
	}
	return srv, nil
}
