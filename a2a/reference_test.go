package a2a_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/tool"
)

// jsAgents starts the agents of clienttest/server.mjs, written with the
// official A2A JavaScript SDK (installed by npm from clienttest's lock
// file), and returns their base URL; it skips unless
// DEPUTY_TEST_A2A_NODE_MODULES names that installation.
func jsAgents(t *testing.T) string {
	t.Helper()
	nm := os.Getenv("DEPUTY_TEST_A2A_NODE_MODULES")
	if nm == "" {
		t.Skip("set DEPUTY_TEST_A2A_NODE_MODULES to a2a/clienttest/node_modules after npm ci there (.ci/run does) to run the agents written with the A2A JavaScript SDK")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed for the JavaScript A2A agents: %v", err)
	}
	nm, err = filepath.Abs(nm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(nm, "@a2a-js", "sdk", "package.json")); err != nil {
		t.Fatalf("DEPUTY_TEST_A2A_NODE_MODULES=%s holds no @a2a-js/sdk: run npm ci in a2a/clienttest", nm)
	}
	// The script runs beside a link to the node_modules named, wherever
	// they are, so that its imports resolve there.
	script, err := os.ReadFile(filepath.Join("clienttest", "server.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "server.mjs"), script, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(nm, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "server.mjs"))
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		// The SDK reports what goes wrong on the server side (a bad
		// request, an event out of order) there.
		if stderr.Len() > 0 {
			t.Errorf("the JavaScript agents wrote to stderr:\n%s", stderr.String())
		}
	})
	type line struct {
		s   string
		err error
	}
	first := make(chan line, 1)
	go func() {
		s, err := bufio.NewReader(stdout).ReadString('\n')
		first <- line{s, err}
	}()
	var l line
	select {
	case l = <-first:
	case <-time.After(30 * time.Second):
		cancel()
		<-first
		t.Fatal("the JavaScript agents printed no URL within 30 s")
	}
	if l.err != nil {
		cancel()
		_ = cmd.Wait()
		t.Fatalf("the JavaScript agents printed no URL: %v\n%s", l.err, stderr.String())
	}
	return strings.TrimSpace(l.s)
}

// jsReceived is what the JavaScript agents were sent, and the payments
// their askers made.
type jsReceived struct {
	Messages []struct {
		Agent            string `json:"agent"`
		OnWire           bool   `json:"onWire"` // the ids below are the ones on the wire
		MessageTaskID    string `json:"messageTaskId"`
		MessageContextID string `json:"messageContextId"`
		TaskID           string `json:"taskId"`
		ContextID        string `json:"contextId"`
		Text             string `json:"text"`
	} `json:"messages"`
	Payments int `json:"payments"`
}

func received(t *testing.T, base string) jsReceived {
	t.Helper()
	resp, err := http.Get(base + "/received")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r jsReceived
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

// connectTool connects to the JavaScript agent at url and returns it as a
// sub-agent tool.
func connectTool(t *testing.T, url string) tool.Tool {
	t.Helper()
	remote, err := a2a.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { remote.Close() })
	sub, err := remote.Tool()
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// sinkOf gathers the events of a run.
type sinkOf struct {
	mu     sync.Mutex
	events []event.Event
}

func (s *sinkOf) Emit(e event.Event) {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}

// text is the text the run's sub-agents streamed.
func (s *sinkOf) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, e := range s.events {
		if e.Type == event.TextMessageContent && e.SubagentRunID != "" {
			b.WriteString(e.Delta)
		}
	}
	return b.String()
}

// A deputy lead delegates to an agent written with the JavaScript SDK:
// its streamed answer reaches the lead's events and its model, one
// message is sent, and the lead's model is asked twice — whatever ids the
// lead's model gives its calls.
func TestReferenceJSAgentAnswers(t *testing.T) {
	base := jsAgents(t)
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			answerer := connectTool(t, base+"/answerer")
			var calls atomic.Int64
			lead := delegator(t, answerer.Definition().Name, mode.id, &calls, answerer)
			before := len(received(t, base).Messages)
			var sink sinkOf
			out, err := lead.Run(event.WithSink(context.Background(), &sink), agent.Input{Text: "pay"})
			if err != nil {
				t.Fatal(err)
			}
			if want := "lead: JS answerer: pay 100"; out.Answer != want {
				t.Errorf("answer %q, want %q", out.Answer, want)
			}
			if got, want := sink.text(), "JS answerer: pay 100"; got != want {
				t.Errorf("the remote child streamed %q, want %q", got, want)
			}
			got := received(t, base).Messages[before:]
			if len(got) != 1 || got[0].Agent != "answerer" || got[0].Text != "pay 100" || !got[0].OnWire || got[0].MessageTaskID != "" {
				t.Errorf("the JavaScript agent received %+v, want one new message \"pay 100\"", got)
			}
			if n := calls.Load(); n != 2 {
				t.Errorf("the lead's model was asked %d times, want 2", n)
			}
		})
	}
}

// A JavaScript agent that asks for input (input-required) suspends the
// deputy run with a question attributed to the remote child; the resumed
// run, under the same journal, sends the answer on the SAME task and
// context, which the JavaScript agent sees, and which completes with the
// answer. The first message is not sent again, the payment is made once,
// and the lead's model is asked twice — over JSON-RPC and HTTP+JSON, and
// whatever ids the lead's model gives its calls.
func TestReferenceJSAgentAsksAndResumesTheSameTask(t *testing.T) {
	base := jsAgents(t)
	for _, path := range []string{"/asker", "/asker-rest"} {
		for _, mode := range idModes {
			t.Run(strings.TrimPrefix(path, "/")+"/"+mode.name, func(t *testing.T) {
				asker := connectTool(t, base+path)
				var calls atomic.Int64
				lead := delegator(t, asker.Definition().Name, mode.id, &calls, asker)
				run := journaledRun(t, lead, "pay")
				start := received(t, base)
				ctx := context.Background()

				_, err := run(ctx)
				var in *tool.Interrupted
				if !errors.As(err, &in) || len(in.Interrupts) != 1 {
					t.Fatalf("first run: %v, want the JavaScript agent's question", err)
				}
				q := in.Interrupts[0]
				if q.Reason != "input" || q.Message != "Which account should pay?" || q.SubagentRunID == "" {
					t.Errorf("question %+v: want the JavaScript agent's words, asked for input, attributed to the remote child", q)
				}
				asked := received(t, base).Messages[len(start.Messages):]
				if len(asked) != 1 || !asked[0].OnWire || asked[0].MessageTaskID != "" || asked[0].TaskID == "" {
					t.Fatalf("the JavaScript agent received %+v, want one message starting a task", asked)
				}

				rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: q.ID, Status: tool.Resolved, Payload: json.RawMessage(`"savings"`)})
				if err != nil {
					t.Fatal(err)
				}
				out, err := run(rctx)
				if err != nil {
					t.Fatalf("resumed run: %v (the JavaScript agent received %+v)", err, received(t, base).Messages[len(start.Messages):])
				}
				if want := "lead: paid from savings"; out.Answer != want {
					t.Errorf("answer %q, want %q", out.Answer, want)
				}
				end := received(t, base)
				got := end.Messages[len(start.Messages):]
				if len(got) != 2 {
					t.Fatalf("the JavaScript agent received %d messages over both runs, want 2 (the question's task started once, answered once): %+v", len(got), got)
				}
				answer := got[1]
				if answer.Text != "savings" {
					t.Errorf("the answer's text %q, want %q", answer.Text, "savings")
				}
				if !answer.OnWire || answer.MessageTaskID != asked[0].TaskID || answer.MessageContextID != asked[0].ContextID {
					t.Errorf("the answer carried task %q and context %q, want the question's, %q and %q",
						answer.MessageTaskID, answer.MessageContextID, asked[0].TaskID, asked[0].ContextID)
				}
				if answer.TaskID != asked[0].TaskID {
					t.Errorf("the answer ran under task %q, want the question's %q", answer.TaskID, asked[0].TaskID)
				}
				if n := end.Payments - start.Payments; n != 1 {
					t.Errorf("%d payments, want 1", n)
				}
				if n := calls.Load(); n != 2 {
					t.Errorf("the lead's model was asked %d times, want 2", n)
				}
			})
		}
	}
}
