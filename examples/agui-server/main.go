// Command agui-server serves a delegating agent over AG-UI. It runs on the
// scripted fake provider, so it needs no key and no network; built with
// -tags realmodel, it runs on the model the environment names (see
// examples/internal/pick). Its first line says which.
//
// The lead agent consults a resident expert (subagent.FromAgent: one agent,
// kept for the server's life, that remembers earlier questions), then hands
// two tasks at once to one-shot sub-agents: a researcher built by a factory
// (FromFactory) and a reviewer the model defines itself (FromReact). Any
// AG-UI client can render the run, each sub-agent's work attributed to it.
//
//	go run ./examples/agui-server             # serves on 127.0.0.1:8080/agui
//	go run ./examples/agui-server -demo       # one request to itself, events printed
//
// With the server running:
//
//	curl -N -H 'Content-Type: application/json' localhost:8080/agui \
//	  -d '{"threadId":"t1","runId":"r1","messages":[{"id":"m1","role":"user","content":"Should we use Go?"}]}'
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to serve on")
	demo := flag.Bool("demo", false, "serve on a free port, send one request, print its events and exit")
	flag.Parse()
	if err := run(*addr, *demo, os.Stdout, os.Getenv); err != nil {
		log.Fatal(err)
	}
}

// run serves on addr, or with demo sends one request to itself, writing to
// w; getenv picks the provider, the scripted fake when nothing is set.
func run(addr string, demo bool, w io.Writer, getenv func(string) string) error {
	scripted := fake.NewProvider() // stands for the per-request scripts
	model, about, err := pick.FromEnv(getenv, scripted)
	if err != nil {
		return err
	}
	if model == provider.Provider(scripted) {
		model = nil
	}
	h, err := handler(model)
	if err != nil {
		return err
	}
	if demo {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/agui", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/agui"
	if demo {
		fmt.Fprintln(w, about)
		return request(w, url, nil)
	}
	// One first line with the URL, which clients read, and the provider.
	fmt.Fprintf(w, "AG-UI endpoint: %s %s\n", url, about)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// handler builds the AG-UI handler on model, or on the scripted fake when
// model is nil. The expert lives as long as the handler; the lead and its
// one-shot children are built per request.
func handler(model provider.Provider) (*agui.Handler, error) {
	var expertModel provider.Provider = fake.NewProvider(fake.Respond(expertReply)).Loop()
	if model != nil {
		expertModel = model
	}
	resident, err := agent.NewReact(expertModel, agent.WithName("expert"), agent.WithHistoryLimit(40))
	if err != nil {
		return nil, err
	}
	expert, err := subagent.FromAgent("expert", "A senior engineer who remembers this server's earlier questions.", resident)
	if err != nil {
		return nil, err
	}
	return agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		question := "the question"
		if last, err := agui.LastUserMessage(in); err == nil {
			question = last.Text
		}
		model := model
		if model == nil {
			model = leadScript(question)
		}
		researcher, err := subagent.FromFactory("researcher", "Gathers facts on one topic.",
			func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(model, agent.WithName("researcher"))
			})
		if err != nil {
			return nil, err
		}
		reviewer, err := subagent.FromReact("reviewer", "A sub-agent you define: give it a system prompt and a task.", model, nil,
			subagent.WithReactOptions(agent.WithMaxSteps(3)))
		if err != nil {
			return nil, err
		}
		return agent.NewReact(model, agent.WithName("lead"), agent.WithTools(expert, researcher, reviewer))
	})
}

// leadScript is what the lead and its one-shot children say for one
// question.
func leadScript(question string) *fake.Provider {
	task := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	return fake.NewProvider(
		fake.Call("expert", string(task(map[string]string{"task": question}))).
			Saying("Let me ask our expert first.").For("lead"),
		fake.Calls(
			provider.ToolCall{Name: "researcher", Arguments: task(map[string]string{"task": "Collect the facts behind: " + question})},
			provider.ToolCall{Name: "reviewer", Arguments: task(map[string]string{
				"system_prompt": "You review advice for hidden costs.",
				"task":          "Review the expert's advice on: " + question,
			})},
		).Saying("Now a researcher and a reviewer, side by side.").For("lead"),
		fake.Text("The expert, the researcher and the reviewer agree: yes, with the costs noted.").For("lead"),
		fake.Text("Three sources support it; one warns about migration cost.").For("researcher"),
		fake.Text("Sound advice. Hidden cost: retraining the team.").For("reviewer"),
	)
}

// expertReply answers and counts the questions of its kept conversation.
func expertReply(ctx context.Context, req provider.Request) (provider.Response, error) {
	n := 0
	for _, m := range req.Messages {
		if m.Role == provider.RoleUser {
			n++
		}
	}
	return provider.Response{Message: provider.AssistantMessage(fmt.Sprintf(
		"Yes, if the team can own it. (That is question %d I have been asked here.)", n))}, nil
}

// request sends one AG-UI request and prints the events it streams, one
// line each, a sub-agent's indented under its name; the pieces of a text
// message or of a tool call's arguments are shown whole at their end.
// also, when not nil, sees each event as it comes (a test's
// subagent.Tree).
func request(w io.Writer, url string, also event.Sink) error {
	body := `{"threadId":"demo-thread","runId":"demo-run","messages":[{"id":"m1","role":"user","content":"Should we use Go for the new service?"}]}`
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New("the server answered " + resp.Status)
	}
	names := map[string]string{}  // sub-agent run id -> name
	pieces := map[string]string{} // message or tool call id -> text so far
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e event.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return err
		}
		if also != nil {
			// A sub-agent's spending, sent in its event's metadata, is
			// decoded into e.Usage and e.Model.
			also.Emit(e)
		}
		who := ""
		if e.SubagentRunID != "" && e.Type != event.SubagentStarted {
			who = "    [" + names[e.SubagentRunID] + "] "
		}
		switch e.Type {
		case event.TextMessageContent:
			pieces[e.MessageID] += e.Delta
		case event.ToolCallArgs:
			pieces[e.ToolCallID] += e.Delta
		case event.TextMessageEnd:
			fmt.Fprintf(w, "%ssays %q\n", who, pieces[e.MessageID])
		case event.ToolCallEnd:
			fmt.Fprintf(w, "%scalls %s\n", who, pieces[e.ToolCallID])
		case event.ToolCallStart:
			fmt.Fprintf(w, "%s%s %s\n", who, e.Type, e.ToolCallName)
		case event.SubagentStarted:
			names[e.SubagentRunID] = e.Name
			fmt.Fprintf(w, "  %s %s\n", e.Type, e.Name)
		case event.SubagentFinished:
			fmt.Fprintf(w, "  %s %s\n", e.Type, names[e.SubagentRunID])
		case event.ToolCallResult:
			fmt.Fprintf(w, "%s%s %q\n", who, e.Type, e.Content)
		case event.RunStarted:
			fmt.Fprintln(w, e.Type, e.ThreadID, e.RunID)
		case event.RunFinished:
			fmt.Fprintln(w, e.Type, e.ThreadID, e.RunID, string(e.Result))
		case event.TextMessageStart, event.StepStarted, event.StepFinished:
		case event.Custom:
			if e.Name != agent.UsageEvent { // each model call's spending: not shown
				fmt.Fprintln(w, who+string(e.Type)+" "+e.Name)
			}
		default:
			fmt.Fprintln(w, who+string(e.Type))
		}
	}
	return sc.Err()
}
