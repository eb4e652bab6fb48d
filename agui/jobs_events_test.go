package agui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// jobEventValue is what the CUSTOM events of a background job hold: a
// status or a receipt, and the job's sub-agent run id.
type jobEventValue struct {
	JobID     string `json:"job_id"`
	RunID     string `json:"subagent_run_id"`
	State     string `json:"state"`
	Task      string `json:"task"`
	MessageID string `json:"message_id"`
	Step      int    `json:"step"`
	Seq       int    `json:"seq"`
	Text      string `json:"text"`
}

// The actions on background jobs reach an AG-UI client as CUSTOM events
// naming the job and its sub-agent: two jobs started, a message queued
// for one and delivered before its second step, its status asked, the
// other cancelled, both ended; each in the order it happened, a message
// queued before it is delivered and a job's end after its sub-agent's.
func TestJobActionsAreEvents(t *testing.T) {
	jobIDs := func(req provider.Request) (ids []string) {
		for _, m := range req.Messages {
			var r struct {
				JobID  string `json:"job_id"`
				Status string `json:"status"`
			}
			if m.Role == provider.RoleTool && json.Unmarshal([]byte(m.Content), &r) == nil && r.Status == subagent.JobRunning {
				ids = append(ids, r.JobID)
			}
		}
		return ids
	}
	call := func(req provider.Request, action string, id int, extra string) (provider.Response, error) {
		args := `{"action":"` + action + `","job_id":"` + jobIDs(req)[id] + `"` + extra + `}`
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "j_" + action, Name: subagent.JobsToolName, Arguments: json.RawMessage(args)})}, nil
	}
	jobs := func(action string, id int, extra string) fake.Reply {
		return fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			return call(req, action, id, extra)
		})
	}
	// The first job looks something up, and is told where to look while
	// it does; the second waits until it is cancelled.
	queued := make(chan struct{})
	var began sync.WaitGroup // each job's first model call
	began.Add(2)
	lead := fake.NewProvider(
		fake.Calls(
			provider.ToolCall{ID: "s1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"dig","background":true}`)},
			provider.ToolCall{ID: "s2", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"idle","background":true}`)},
		),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			began.Wait()
			return call(req, "send", 0, `,"message":"look under the stairs"`)
		}),
		jobs("status", 0, ""),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			close(queued) // the receipt and the status are in the conversation
			return call(req, "cancel", 1, "")
		}),
		jobs("wait", 0, `,"timeout_seconds":600`),
		fake.Text("done"),
	).Named("p", "m")
	answer := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		task := req.Messages[0].Content
		switch {
		case strings.Contains(task, "idle"):
			began.Done()
			<-ctx.Done()
			return provider.Response{}, ctx.Err()
		case len(req.Messages) == 1:
			began.Done()
			select {
			case <-queued:
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			}
			return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "l1", Name: "lookup", Arguments: json.RawMessage(`{}`)})}, nil
		}
		last := req.Messages[len(req.Messages)-1].Content
		return provider.Response{Message: provider.AssistantMessage("found it: " + last[strings.LastIndex(last, "\n")+1:])}, nil
	}).For(subagent.DefaultForkName)
	child := fake.NewProvider(answer, answer, answer).Named("p", "m")

	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return backgroundLead(lead, child, []tool.Tool{lookupTool()})
	})
	if err != nil {
		t.Fatal(err)
	}
	evs := aguiRunChecked(t, serve(t, h).URL, runBody("th", "r1", nil), http.StatusOK, eventcheck.Options{Background: true})
	if fin, _ := finished(t, evs); string(fin.Result) != `"done"` {
		t.Fatalf("the run answered %s", fin.Result)
	}

	// Each sub-agent by the call that started it; each job event as
	// "name attribution job state seq step text".
	sub := map[string]string{} // sub-agent run id → spawn call
	var got []string
	var ended []string // sub-agents, in the order their SUBAGENT_* terminal events came
	for _, e := range evs {
		switch e.Type {
		case event.SubagentStarted:
			sub[e.SubagentRunID] = e.ParentToolCallID
		case event.SubagentFinished, event.SubagentError:
			ended = append(ended, sub[e.SubagentRunID])
		case event.Custom:
			if !strings.HasPrefix(e.Name, "deputy.job_") {
				continue
			}
			var v jobEventValue
			if err := json.Unmarshal(e.Value, &v); err != nil {
				t.Fatalf("%s: %v", e.Name, err)
			}
			call, ok := sub[v.RunID]
			if !ok {
				t.Fatalf("%s names sub-agent %q, which has not started: %s", e.Name, v.RunID, e.Value)
			}
			by := "lead"
			if e.SubagentRunID != "" {
				by = sub[e.SubagentRunID]
			}
			job := map[string]string{"s1": "job1", "s2": "job2"}[call]
			if v.JobID == "" || (v.State != "" && v.Task == "" && v.MessageID == "") {
				t.Errorf("%s: %s lacks its job", e.Name, e.Value)
			}
			line := strings.Join([]string{strings.TrimPrefix(e.Name, "deputy."), by, job, v.State, itoa(v.Seq), itoa(v.Step), v.Text}, " ")
			if e.Name == subagent.JobEndedEvent && slices.Contains(ended, call) {
				line += " after its sub-agent"
			}
			got = append(got, line)
		}
	}
	want := []string{
		"job_started lead job1 running 0 0 ",
		"job_started lead job2 running 0 0 ",
		"job_message lead job1 queued 1 0 look under the stairs",
		"job_status lead job1 running 0 1 ",
		"job_delivered s1 job1 delivered 1 2 ",
		"job_cancelled lead job2 running 0 1 ",
		"job_ended lead job2 cancelled 0 1  after its sub-agent",
		"job_ended lead job1 done 0 2  after its sub-agent",
	}
	// The job's delivery and the lead's status and cancel race: the lead
	// goes on while the job's model answers. Each job's own order holds.
	for _, job := range []string{"job1", "job2"} {
		if diff := cmp.Diff(only(want, job), only(got, job)); diff != "" {
			t.Errorf("the events of %s (-want +got):\n%s", job, diff)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// only returns the lines about job.
func only(lines []string, job string) []string {
	var out []string
	for _, l := range lines {
		if strings.Fields(l)[2] == job {
			out = append(out, l)
		}
	}
	return out
}
