package temporal

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// remoteSecret is what the remote's own tool answers with, which the
// worker's policy must keep from every model of the tree on Temporal.
const remoteSecret = "AKIA0123456789ABCDEF"

// sentBodies keeps the bodies of the requests an A2A server was sent.
type sentBodies struct {
	mu     sync.Mutex
	bodies []string
}

func (s *sentBodies) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, string(b))
		s.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		h.ServeHTTP(w, r)
	})
}

func (s *sentBodies) holding(secret string) (n int, holding bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.bodies {
		holding = holding || strings.Contains(b, secret)
	}
	return len(s.bodies), holding
}

// The edge to an A2A remote, served by deputy in process, is bound by a
// worker's policy on Temporal as in process: the lead on Temporal calls
// the remote (a factory's agent, run in an activity) and a plain tool;
// the policy sees the call of the remote, its hand-off and its answer;
// the secret the lead was given is in no request to the remote, and the
// one the remote answers with reaches no model of the tree; and the
// remote's own tool is its own, seen by its own policy and not by the
// worker's — whatever ids the models give their calls.
func TestPolicyBindsTheEdgeToARemoteOnTemporal(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) {
			n := new(atomic.Int64)
			tools := &countedTools{args: map[string][]string{}}
			lead := &steps{name: "lead", id: mode.id, n: n, steps: [][][2]string{{{"search", `{"q":"{task}"}`}, {"clerk", `{"task":"{task}"}`}}}}
			clerk := &steps{name: "clerk", id: mode.id, n: n, steps: [][][2]string{{{"ledger", `{"q":"{task}"}`}}}}
			ledger := tool.Func{Def: tool.Definition{Name: "ledger", Description: "Reads the books.", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(_ context.Context, call tool.Call) (tool.Result, error) {
					tools.mu.Lock()
					defer tools.mu.Unlock()
					tools.args["ledger"] = append(tools.args["ledger"], string(call.Arguments))
					return tool.Result{Content: "balance 42 on " + remoteSecret}, nil
				}}

			// The remote, with a policy of its own.
			own := &watcher{points: map[policy.Point]int{}, tools: map[string]int{}}
			served, err := policy.New(own)
			if err != nil {
				t.Fatal(err)
			}
			srv, err := a2a.NewPerTask(func(context.Context, a2a.Task) (agent.Agent, error) {
				return agent.NewReact(clerk, agent.WithName("clerk"), agent.WithTools(ledger), agent.WithPolicy(served))
			}, a2a.WithName("clerk"), a2a.WithDescription("Keeps the books."))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			var sent sentBodies
			hs := httptest.NewServer(sent.wrap(srv))
			t.Cleanup(hs.Close)
			remote, err := a2a.Connect(context.Background(), hs.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { remote.Close() })

			w := &watcher{points: map[policy.Point]int{}, tools: map[string]int{}, paths: map[string]bool{}, results: map[string][]string{}}
			pol, err := policy.New(w, policy.Redact("secrets", []string{temporalSecret, remoteSecret}))
			if err != nil {
				t.Fatal(err)
			}
			reg, err := tool.NewRegistry(tools.tool(t, "search"))
			if err != nil {
				t.Fatal(err)
			}
			rt := &Runtime{
				Providers: map[string]provider.Provider{"m": lead},
				Tools:     reg,
				Factories: map[string]subagent.Factory{
					"clerk": func(context.Context, json.RawMessage) (agent.Agent, error) { return remote, nil },
				},
				Policy: pol,
			}
			spec := Spec{Name: "lead", Provider: "m", Tools: []string{"search"},
				SubAgents: []SubAgent{{Name: "clerk", Description: "Keeps the books.", Factory: "clerk"}}}
			env := newEnv(t, rt)
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "audit the account with key " + temporalSecret})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			if tools.runs("search") != 1 || tools.runs("ledger") != 1 || clerk.starts() != 1 {
				t.Fatalf("search ran %d times, the remote's ledger %d, the remote's model began %d tasks: want one each, the tree did not run as built",
					tools.runs("search"), tools.runs("ledger"), clerk.starts())
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, want := range []string{"tool search@lead", "tool clerk@lead", "delegation clerk@lead", "result clerk@lead", "result search@lead", "model @lead"} {
				if !w.paths[want] {
					t.Errorf("no check %q; the checks were %v", want, w.paths)
				}
			}
			if got := w.results["clerk"]; len(got) != 1 || !strings.Contains(got[0], "clerk(") {
				t.Errorf("the policy saw the remote's answers %q, want its one answer", got)
			}
			// The remote's own tools are its own.
			own.mu.Lock()
			if w.tools["ledger"] != 0 || own.tools["ledger"] != 1 {
				t.Errorf("the worker's policy saw %d calls of the remote's ledger (want none), the remote's own %d (want 1)", w.tools["ledger"], own.tools["ledger"])
			}
			own.mu.Unlock()
			if n, holding := sent.holding(temporalSecret); n == 0 {
				t.Error("no request reached the remote")
			} else if holding {
				t.Errorf("of the %d requests sent to the remote, one held the secret the lead was given", n)
			}
			if _, holding := lead.sent(remoteSecret); holding {
				t.Error("the lead's model was sent the secret the remote answered with")
			}
			if !strings.Contains(out.Answer, "clerk(") || strings.Contains(out.Answer, remoteSecret) {
				t.Errorf("the lead answered %q, want the remote's answer, redacted", out.Answer)
			}
		})
	}
}
