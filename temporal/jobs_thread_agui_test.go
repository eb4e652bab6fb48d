package temporal

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A thread served by the AG-UI handler whose job works on across turns on
// Temporal tells each turn's stream of the job before any event of it, as
// in process: the first turn starts a job that digs until the third turn
// lets it; the second sends it a message; the third waits for its answer,
// which took the message once. Each stream announces the job once, with
// its SUBAGENT_STARTED and deputy.job_started as the first turn published
// them (the same sub-agent run, name and spawning call), and has every
// event of the job after them. The dig runs once, and no model answer is
// asked for twice. (The later turns' streams had the job's events, its
// message queued, its steps, its end, of a sub-agent they were never told
// started.)
func TestServedThreadAnnouncesItsJobsOnTemporal(t *testing.T) {
	inEachIDMode(t, servedThreadAnnouncesJobs)
}

func servedThreadAnnouncesJobs(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var n, leadCalls, jobCalls atomic.Int64
	reg, dug, release := releasableDig(t)
	m := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		task := firstUserOf(req)
		if task == "dig" {
			jobCalls.Add(1)
			if len(rs) == 0 {
				return call("dig", `{}`)
			}
			told := ""
			for _, msg := range req.Messages[1:] {
				if msg.Role == provider.RoleUser && strings.Contains(msg.Content, "dig deeper") {
					told += "; told: dig deeper"
				}
			}
			return provider.AssistantMessage(rs[0] + told), nil
		}
		leadCalls.Add(1)
		switch {
		case task == "start" && len(rs) == 0:
			return call(SpawnToolName, `{"task":"dig","background":true}`)
		case task == "send" && len(rs) == 0:
			return call(subagent.JobsToolName, `{"action":"send","job_id":"job_1","message":"dig deeper"}`)
		case task == "wait" && len(rs) == 0:
			release() // the job works on while this turn runs
			return call(subagent.JobsToolName, `{"action":"wait","job_id":"job_1","timeout_seconds":60}`)
		}
		return provider.AssistantMessage("lead: " + rs[len(rs)-1]), nil
	}}
	hub := NewHub()
	queue := fmt.Sprintf("deputy-thread-agui-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Events: hub})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	h, err := agui.New(&Agent{Client: c, TaskQueue: queue, Events: hub,
		Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"dig"}, Spawn: true, Background: true, JobsAcrossTurns: true}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	thread := "thread-" + queue
	say := func(run, text string) ([]event.Event, string) {
		t.Helper()
		return postTurn(t, ctx, srv.URL, thread, run, text)
	}
	var turns [][]event.Event
	first, _ := say("r1", "start")
	turns = append(turns, first)
	starts, job := announcedJob(t, first) // each job's announcement, as the first turn published it
	for dug.Load() == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	second, got := say("r2", "send")
	turns = append(turns, second)
	if !strings.Contains(got, `"state":"queued"`) {
		t.Errorf("the send answered %q, want a receipt, queued", got)
	}
	third, got := say("r3", "wait")
	turns = append(turns, third)
	if got != "lead: dug; told: dig deeper" {
		t.Errorf("the wait answered %q, want the job's answer, with the message once", got)
	}
	for turn, evs := range turns {
		announcedOnce(t, turn+1, evs, starts)
	}
	if n := customOf(second, job, subagent.JobMessageEvent); n != 1 {
		t.Errorf("the second turn's stream has %d %s events of the job, want 1", n, subagent.JobMessageEvent)
	}
	if n := customOf(third, job, subagent.JobEndedEvent); n != 1 {
		t.Errorf("the third turn's stream has %d %s events of the job, want 1", n, subagent.JobEndedEvent)
	}
	if d, l, j := dug.Load(), leadCalls.Load(), jobCalls.Load(); d != 1 || l != 6 || j != 2 {
		t.Errorf("the dig ran %d times, the lead's model answered %d times, the job's %d; want 1, 6 and 2", d, l, j)
	}
}

// releasableDig returns a registry of one tool, "dig", that counts its
// runs in dug and answers "dug" once release is called (as many times as
// wanted), or fails when its context ends.
func releasableDig(t *testing.T) (reg *tool.Registry, dug *atomic.Int64, release func()) {
	t.Helper()
	dug = new(atomic.Int64)
	released := make(chan struct{})
	var once sync.Once
	dig := tool.Must(tool.New("dig", "Digs.", func(ctx context.Context, _ struct{}) (string, error) {
		dug.Add(1)
		select {
		case <-released:
			return "dug", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}))
	reg, err := tool.NewRegistry(dig)
	if err != nil {
		t.Fatal(err)
	}
	return reg, dug, func() { once.Do(func() { close(released) }) }
}

// postTurn posts the turn run, of the user's text, of thread to the AG-UI
// handler at url, and returns the stream the client read, which must end
// with RUN_FINISHED, and the run's answer.
func postTurn(t *testing.T, ctx context.Context, url, thread, run, text string) ([]event.Event, string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"threadId": thread, "runId": run,
		"messages": []map[string]string{{"id": run, "role": "user", "content": text}}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	evs := sseEvents(t, resp.Body)
	last := evs[len(evs)-1]
	if last.Type != event.RunFinished {
		t.Fatalf("turn %q ended with %s %s", text, last.Type, last.Message)
	}
	var answer string
	_ = json.Unmarshal(last.Result, &answer)
	return evs, answer
}

// announcedJob returns each job's announcement in the stream of the turn
// that started it (its SUBAGENT_STARTED, then its deputy.job_started),
// keyed by the job's sub-agent run, which must be one; and that run.
func announcedJob(t *testing.T, evs []event.Event) (starts map[string][]event.Event, job string) {
	t.Helper()
	starts = map[string][]event.Event{}
	for _, e := range evs {
		if e.Type == event.SubagentStarted {
			starts[e.SubagentRunID] = []event.Event{e}
		}
		if e.Type == event.Custom && e.Name == subagent.JobStartedEvent {
			of := jobRunOf(t, e)
			starts[of] = append(starts[of], e)
		}
	}
	if len(starts) != 1 {
		t.Fatalf("the first turn announced %d jobs, want 1", len(starts))
	}
	for k := range starts {
		job = k
	}
	return starts, job
}

// announcedOnce checks the stream of a turn: every event of a job (those
// its sub-agent run publishes, and the deputy.job_* events that name it)
// comes after its announcement, which the stream has once: its
// SUBAGENT_STARTED and deputy.job_started as the turn that started it
// published them (starts).
func announcedOnce(t *testing.T, turn int, evs []event.Event, starts map[string][]event.Event) {
	t.Helper()
	told := map[string]bool{}
	for i, e := range evs {
		of := e.SubagentRunID
		if e.Type == event.Custom && strings.HasPrefix(e.Name, "deputy.job_") {
			of = jobRunOf(t, e)
		}
		want, isJob := starts[of]
		if !isJob {
			continue
		}
		if e.Type == event.SubagentStarted {
			if told[of] {
				t.Errorf("turn %d: event %d: job %s is announced again", turn, i, of)
			}
			told[of] = true
			if i+1 >= len(evs) || !sameEvent(e, want[0]) || !sameEvent(evs[i+1], want[1]) {
				t.Errorf("turn %d: job %s is announced as %s, want %s, as it started", turn, of, asJSON(evs[i:min(i+2, len(evs))]...), asJSON(want...))
			}
			continue
		}
		if !told[of] {
			t.Errorf("turn %d: event %d: %s %s of job %s, which the stream was not told started", turn, i, e.Type, e.Name, of)
		}
	}
	if len(evs) > 0 && len(told) == 0 {
		t.Errorf("turn %d: the stream never announces the job", turn)
	}
}

// sameEvent compares two events as a client reads them, but for when
// they were sent.
func sameEvent(a, b event.Event) bool {
	a.Timestamp, b.Timestamp = 0, 0
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// asJSON renders evs for a message.
func asJSON(evs ...event.Event) string {
	b, _ := json.Marshal(evs)
	return string(b)
}

// jobRunOf is the sub-agent run id a deputy.job_* event names.
func jobRunOf(t *testing.T, e event.Event) string {
	t.Helper()
	var v struct {
		RunID string `json:"subagent_run_id"`
	}
	if err := json.Unmarshal(e.Value, &v); err != nil {
		t.Fatalf("%s: %s: %v", e.Name, e.Value, err)
	}
	return v.RunID
}

// customOf counts the CUSTOM events named name of the job whose sub-agent
// run is job in evs.
func customOf(evs []event.Event, job, name string) int {
	n := 0
	for _, e := range evs {
		if e.Type == event.Custom && e.Name == name && strings.Contains(string(e.Value), `"subagent_run_id":"`+job+`"`) {
			n++
		}
	}
	return n
}

// sseEvents reads the events of a whole AG-UI stream.
func sseEvents(t *testing.T, r io.Reader) []event.Event {
	t.Helper()
	var out []event.Event
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e event.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("frame %q: %v", line, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("an empty stream")
	}
	return out
}
