package devui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/devui"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/tool"
)

// recordedAnswer is an answer as GET /runs gives it.
type recordedAnswer struct {
	InterruptID string          `json:"interruptId"`
	Status      string          `json:"status"`
	Payload     json.RawMessage `json:"payload"`
	By          string          `json:"by"`
	At          int64           `json:"at"`
}

// approvalServer serves, over the SQLite file db, a lead that asks to
// deploy (a tool that needs approval) and then says what the deploy
// returned, its calls named as ids says; deploys counts the deploys.
// Users name themselves in X-User. Each call is a server's life: a
// restart is a second call over the same file.
func approvalServer(t *testing.T, db, ids string, deploys *atomic.Int64) *httptest.Server {
	t.Helper()
	b, err := sqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(b)
	if err != nil {
		t.Fatal(err)
	}
	var replies atomic.Int64
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("done: " + last.Content)}, nil
		}
		id := map[string]string{"fresh": fmt.Sprintf("toolu_%d_%d", time.Now().UnixNano(), replies.Add(1)), "none": "", "restart": "call_0"}[ids]
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: id, Name: "deploy", Arguments: json.RawMessage(`{"env":"prod"}`)})}, nil
	})
	deploy := tool.RequireApproval(tool.Func{
		Def: tool.Definition{Name: "deploy", Description: "Deploys.", Parameters: json.RawMessage(`{"type":"object","properties":{"env":{"type":"string"}}}`)},
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
			deploys.Add(1)
			return tool.Result{Content: "deployed"}, nil
		},
	}, "", 0)
	auth := func(r *http.Request, thread string) (string, error) {
		if u := r.Header.Get("X-User"); u != "" {
			return u, nil
		}
		return "", &agui.Refusal{Status: http.StatusUnauthorized}
	}
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(fake.NewProvider(fake.Respond(model.Complete)), agent.WithName("lead"), agent.WithTools(deploy))
	}, agui.WithThreads(st), agui.WithAuthorize(auth))
	if err != nil {
		t.Fatal(err)
	}
	v, err := devui.New(h, devui.WithStore(st), devui.WithAuthorize(auth))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(v)
	t.Cleanup(func() { srv.Close(); st.Close() })
	return srv
}

// An answered question is kept with the run it resumed — the answer, who
// gave it and when — so that after a restart the viewer draws it answered,
// not asking still; the deploy it approved ran once. A resume the AG-UI
// handler refuses records nothing.
func TestAnswerOutlivesARestart(t *testing.T) {
	for _, ids := range []string{"fresh", "none", "restart"} {
		t.Run(ids, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "devui.db")
			var deploys atomic.Int64
			srv := approvalServer(t, db, ids, &deploys)
			status, events := post(t, srv.URL+"/run", runBody, "X-User", "ann")
			var asked string
			for _, e := range events {
				var ev struct {
					Type    string
					Outcome struct {
						Interrupts []struct{ ID string }
					}
				}
				if json.Unmarshal(e, &ev) == nil && ev.Type == "RUN_FINISHED" && len(ev.Outcome.Interrupts) == 1 {
					asked = ev.Outcome.Interrupts[0].ID
				}
			}
			if status != http.StatusOK || asked == "" {
				t.Fatalf("the run: %d, asked %q; want one question", status, asked)
			}
			// An answer to a question nobody asked is refused, and not kept.
			if status, _ := post(t, srv.URL+"/run", `{"threadId":"t1","runId":"r2","messages":[],"resume":[{"interruptId":"int_nobody","status":"resolved","payload":{"approved":true}}]}`, "X-User", "ann"); status == http.StatusOK {
				t.Fatalf("a resume answering no question was taken")
			}
			before := time.Now().UnixMilli()
			answer := `{"threadId":"t1","runId":"r3","messages":[],"resume":[{"interruptId":"` + asked + `","status":"resolved","payload":{"approved":true,"note":"go ahead"}}]}`
			if status, events := post(t, srv.URL+"/run", answer, "X-User", "ann"); status != http.StatusOK || finalAnswer(events) != "done: deployed" {
				t.Fatalf("the resume: %d, answer %q", status, finalAnswer(events))
			}
			after := time.Now().UnixMilli()
			srv.Close()

			srv = approvalServer(t, db, ids, &deploys) // the restart
			req, _ := http.NewRequest("GET", srv.URL+"/runs/t1", nil)
			req.Header.Set("X-User", "ann")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got struct {
				Runs []struct {
					RunID   string           `json:"runId"`
					Answers []recordedAnswer `json:"answers"`
				} `json:"runs"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if len(got.Runs) != 2 || got.Runs[0].RunID != "r1" || got.Runs[1].RunID != "r3" {
				t.Fatalf("runs %+v; want r1 and r3", got.Runs)
			}
			if len(got.Runs[0].Answers) != 0 {
				t.Errorf("the run that asked carries answers %+v", got.Runs[0].Answers)
			}
			a := got.Runs[1].Answers
			if len(a) != 1 || a[0].InterruptID != asked || a[0].Status != "resolved" || a[0].By != "ann" ||
				string(a[0].Payload) != `{"approved":true,"note":"go ahead"}` || a[0].At < before || a[0].At > after {
				t.Errorf("the resume's answers %+v; want ann's approval of %s, given between %d and %d", a, asked, before, after)
			}
			if n := deploys.Load(); n != 1 {
				t.Errorf("deployed %d times, want once", n)
			}
			if !strings.Contains(string(a[0].Payload), "go ahead") {
				t.Errorf("the answer's note is lost: %s", a[0].Payload)
			}
		})
	}
}
