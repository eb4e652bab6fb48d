package agui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// slowLead is a lead whose model calls "slow" and then answers with what it
// returned; slow (which needs approval when approve is set) says it has
// started on started, then runs until its context ends.
func slowLead(t *testing.T, started chan<- struct{}, approve bool) agent.Agent {
	t.Helper()
	slow, err := tool.New("slow", "Takes a long time.", func(ctx context.Context, _ struct{}) (string, error) {
		started <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if approve {
		slow = tool.RequireApproval(slow, "", 0)
	}
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		u := provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}
		if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("done: " + last.Content), Usage: u, Model: "m"}, nil
		}
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "slow", Arguments: json.RawMessage(`{}`)}), Usage: u, Model: "m"}, nil
	})
	a, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(slow))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// stopWhenStarted posts body to url, stops the thread's run through h once
// slow has started, and returns the run's events.
func stopWhenStarted(t *testing.T, h *agui.Handler, url, body string, started <-chan struct{}) []event.Event {
	t.Helper()
	resp := post(t, url, body)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the tool did not start")
	}
	if !h.Stop("", "th") {
		t.Fatal("Stop found no run on the thread")
	}
	evs := events(readFrames(t, resp.Body))
	if problems := eventcheck.Check(evs, eventcheck.Options{Resumed: strings.Contains(body, `"resume":[{`)}); len(problems) > 0 {
		t.Fatalf("the stream breaks the rules:\n%s", strings.Join(problems, "\n"))
	}
	return evs
}

// A run the server stops ends with RUN_FINISHED outcome cancelled, with
// the usage spent, and the thread has no run left to stop.
func TestStopEndsTheRunCancelled(t *testing.T) {
	started := make(chan struct{}, 1)
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return slowLead(t, started, false), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if h.Stop("", "th") {
		t.Error("Stop found a run before any started")
	}
	evs := stopWhenStarted(t, h, serve(t, h).URL, runBody("th", "r1", nil), started)
	fin, o := finished(t, evs)
	if o.Type != "cancelled" || len(fin.Result) != 0 {
		t.Fatalf("the stopped run ended with outcome %s, result %s; want cancelled and no result", fin.Outcome, fin.Result)
	}
	if diff := cmp.Diff([]tokenUsage{{Input: 10, Output: 2, Total: 12, Model: "m"}}, usageOf(t, fin.Usage)); diff != "" {
		t.Errorf("usage of the stopped run (-want +got):\n%s", diff)
	}
	if h.Stop("", "th") {
		t.Error("Stop found a run after it ended")
	}
}

// suspendedThread serves a handler with stored threads whose lead asks
// for approval, runs thread "th" to its interrupt (run-1), and returns
// the answers that approve it; started receives when the approved call
// runs.
func suspendedThread(t *testing.T) (h *agui.Handler, url string, ans []tool.Answer, started chan struct{}) {
	t.Helper()
	st := sqliteStore(t, t.TempDir()+"/s.db")
	started = make(chan struct{}, 1)
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return slowLead(t, started, true), nil
	}, agui.WithThreads(st))
	if err != nil {
		t.Fatal(err)
	}
	url = serve(t, h).URL
	_, o := finished(t, aguiRun(t, url, runBody("th", "run-1", nil), http.StatusOK))
	if o.Type != "interrupt" {
		t.Fatalf("first run: outcome %q, want interrupt", o.Type)
	}
	ans = []tool.Answer{{InterruptID: o.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}}
	return h, url, ans, started
}

// A stopped run that resumed a suspended one leaves nothing waiting: the
// thread goes on with a new message, as AG-UI says of a cancelled run.
func TestStoppedResumeForgetsTheSuspendedRun(t *testing.T) {
	h, url, ans, started := suspendedThread(t)
	_, o2 := finished(t, stopWhenStarted(t, h, url, runBody("th", "run-2", ans), started))
	if o2.Type != "cancelled" {
		t.Fatalf("the stopped resume ended with outcome %q, want cancelled", o2.Type)
	}
	msg := aguiRun(t, url, runBody("th", "run-3", ans), http.StatusConflict)[0].Message
	if !strings.Contains(msg, "nothing is waiting") {
		t.Errorf("answering again after the stop: %s, want nothing to be waiting", msg)
	}
	// A new message is an ordinary new run, which asks afresh.
	if _, o := finished(t, aguiRun(t, url, runBody("th", "run-4", nil), http.StatusOK)); o.Type != "interrupt" {
		t.Errorf("a new message after the stop: outcome %q, want a fresh run that asks again", o.Type)
	}
}

// A client that stops a resumed run by going away (abortRun) still holds
// the interrupts: the suspended run stays, and the client may answer again.
func TestClientGoneDuringResumeKeepsTheSuspendedRun(t *testing.T) {
	h, url, ans, started := suspendedThread(t)
	resp := post(t, url, runBody("th", "run-2", ans))
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the resumed call did not run")
	}
	resp.Body.Close()
	// Once the server has wound the run up, the answers are taken again.
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp := post(t, url, runBody("th", "run-3", ans))
		if resp.StatusCode == http.StatusOK {
			select { // the approved call runs again
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("the resumed call did not run again")
			}
			h.Stop("", "th")
			resp.Body.Close()
			break
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("answering again after the client left: status %d, want 200 once the run has ended", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
