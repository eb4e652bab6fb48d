// Command devui serves the run-tree viewer (package devui) beside an AG-UI
// endpoint, on the scripted fake provider: open the URL it prints, press
// Run, and watch a small delegation tree grow. The lead hands two
// researchers a question each and an editor the write-up; the editor asks
// a fact-checker, then wants to publish, which needs a person's approval:
// the viewer shows the question where the editor asked it, and answering
// it resumes the run.
//
//	go run ./examples/devui                    # serves on 127.0.0.1:8787
//	go run ./examples/devui -store devui.db    # keeps threads and runs in SQLite
//	go run ./examples/devui -children 1000     # the lead fans out to 1,000 workers instead
//	go run ./examples/devui -background        # the lead starts two surveys in the background and steers them
//	go run ./examples/devui -cassette examples/quickstart/testdata/tour.jsonl
//	                                           # a button draws the tree of a recorded run
//	go run ./examples/devui -pace 400ms -inflight 2
//	                                           # each model call takes 400 ms, two at a time:
//	                                           # tokens climb call by call, calls queue
//
// On a finished run, "Re-run from here" on one of the lead's sub-agents
// re-runs the turn with that sub-agent's task edited: the others' answers
// are kept, and /debug/counts shows that their models and the publish
// tool were not called again; /debug/billed shows the tokens each model
// billed, which the viewer's figures add up to.
//
// Threads and the runs the viewer started are kept in the store (in
// memory unless -store names a file), so the viewer lists them and, with a
// file, redraws them after a restart.
package main

import (
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/devui"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8787", "address to serve on (port 0: any free port)")
	path := flag.String("store", "", "SQLite file to keep threads and runs in (default: memory)")
	var sc scripted
	flag.IntVar(&sc.children, "children", 0, "fan out to this many workers instead of the small tree")
	flag.DurationVar(&sc.pace, "pace", 0, "how long each scripted model call takes")
	flag.IntVar(&sc.inflight, "inflight", 0, "model calls let run at once; the others queue for admission (0: no bound)")
	flag.BoolVar(&sc.background, "background", false, "start two background surveys and send each a message instead of the small tree")
	recorded := flag.String("cassette", "", "a cassette file (package cassette) whose recorded run the viewer draws on request")
	flag.Parse()
	var opts []devui.Option
	if *recorded != "" {
		c, err := cassette.Load(*recorded)
		if err != nil {
			log.Fatal(err)
		}
		opts = append(opts, devui.WithCassette(c))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, *path, sc, os.Stdout, opts...); err != nil {
		log.Fatal(err)
	}
}

// scripted says how the scripted models answer.
type scripted struct {
	children int           // the lead fans out to this many workers (0: the small tree)
	pace     time.Duration // each model call takes this long
	inflight int           // model calls run at once (0: no bound)
	// background: the lead starts two surveys as background jobs, sends
	// each a message while it works, and waits for both.
	background bool
	// model, when not nil, answers for the scripted models of the small
	// tree (a test's cassette of their recorded run).
	model provider.Provider
}

// provider is the scripted models' provider: replies paced, and admitted
// sc.inflight at a time.
func (sc scripted) provider(replies ...fake.Reply) (provider.Provider, error) {
	for i := range replies {
		replies[i] = replies[i].After(sc.pace)
	}
	var p provider.Provider = fake.NewProvider(replies...).Loop().DontRecord().Named("scripted", "demo-model")
	if sc.inflight > 0 {
		a, err := provider.NewAdmission(provider.WithLimits("demo-model", provider.Limits{InFlight: sc.inflight}))
		if err != nil {
			return nil, err
		}
		p = provider.Admit(p, a)
	}
	return p, nil
}

// run serves until ctx ends, printing the viewer's URL to w; opts are
// the viewer's too.
func run(ctx context.Context, addr, path string, sc scripted, w io.Writer, opts ...devui.Option) error {
	var b store.Backend = memory.New()
	if path != "" {
		var err error
		if b, err = sqlite.Open(path); err != nil {
			return err
		}
	}
	st, err := store.New(b)
	if err != nil {
		return err
	}
	defer st.Close()
	mux, h, err := handler(st, sc, &published, opts...)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(w, "the run-tree viewer: http://%s/devui/\n", ln.Addr())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.Shutdown(sctx)
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// published counts what the editor's publish tool did, in this process.
var published atomic.Int64

// handler is the AG-UI endpoint at /agui, its threads at /threads/ and the
// viewer at /devui/ (with opts), over st.
func handler(st *store.Store, sc scripted, published *atomic.Int64, opts ...devui.Option) (*http.ServeMux, *agui.Handler, error) {
	build := func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		if sc.children > 0 {
			return wide(sc)
		}
		if sc.background {
			return background(sc)
		}
		return small(sc, published)
	}
	h, err := agui.NewPerRequest(build, agui.WithThreads(st))
	if err != nil {
		return nil, nil, err
	}
	v, err := devui.New(h, append([]devui.Option{devui.WithStore(st), devui.WithRerun(build)}, opts...)...)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/agui", h)
	mux.Handle("/threads/", http.StripPrefix("/threads", h.Threads()))
	mux.Handle("/devui/", http.StripPrefix("/devui", v))
	mux.Handle("/{$}", http.RedirectHandler("/devui/", http.StatusFound))
	// What the scripted models and the publish tool did, for a test that
	// checks that a re-run repeated nothing it did not have to.
	mux.HandleFunc("GET /debug/counts", func(w http.ResponseWriter, r *http.Request) {
		counted.mu.Lock()
		defer counted.mu.Unlock()
		c := map[string]int64{"publish": published.Load()}
		for k, v := range counted.calls {
			c[k] = v
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c)
	})
	// The tokens each of the small tree's models billed, in this process,
	// for a test that checks the viewer's figures against them.
	mux.HandleFunc("GET /debug/billed", func(w http.ResponseWriter, r *http.Request) {
		counted.mu.Lock()
		defer counted.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(counted.billed)
	})
	return mux, h, nil
}

// small is the tree of the demo: lead → researcher ×2, editor → fact
// checker, the editor's publish tool asking for approval.
func small(sc scripted, published *atomic.Int64) (agent.Agent, error) {
	p := sc.model
	if p == nil {
		var err error
		if p, err = sc.provider(smallScript()...); err != nil {
			return nil, err
		}
	}
	checker, err := subagent.FromFactory("fact_checker", "Checks one claim.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(p, agent.WithName("fact_checker"))
	}, subagent.WithMaxDepth(2)) // the editor's own sub-agent
	if err != nil {
		return nil, err
	}
	publish := tool.RequireApproval(tool.Func{
		Def: tool.Definition{Name: "publish", Description: "Publishes the write-up.", Parameters: json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"}}}`)},
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
			published.Add(1)
			return tool.Result{Content: "published"}, nil
		},
	}, "Publish the write-up?", 0)
	editorTool, err := subagent.FromFactory("editor", "Writes up the findings and publishes them.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(p, agent.WithName("editor"), agent.WithTools(checker, publish))
	})
	if err != nil {
		return nil, err
	}
	researcherTool, err := subagent.FromFactory("researcher", "Researches one question.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(p, agent.WithName("researcher"))
	})
	if err != nil {
		return nil, err
	}
	return agent.NewReact(p, agent.WithName("lead"), agent.WithTools(researcherTool, editorTool))
}

// smallScript is what the small tree's models answer, each from the
// conversation it is sent.
func smallScript() []fake.Reply {
	return []fake.Reply{
		fake.Respond(billed("lead", lead)).For("lead"),
		fake.Respond(billed("researcher", researcher)).For("researcher"),
		fake.Respond(billed("editor", editor)).For("editor"),
		fake.Respond(billed("fact_checker", factChecker)).For("fact_checker"),
	}
}

// wide is a lead that fans out to sc.children workers, each answering at
// once.
func wide(sc scripted) (agent.Agent, error) {
	calls := make([]provider.ToolCall, sc.children)
	for i := range calls {
		calls[i] = provider.ToolCall{Name: "worker", Arguments: json.RawMessage(fmt.Sprintf(`{"task":"part %d"}`, i))}
	}
	p, err := sc.provider(
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			if hasResults(req) {
				return reply(req, "All parts done.")
			}
			return reply(req, "", calls...)
		}).For("lead"),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			return reply(req, "done: "+req.Messages[0].Content)
		}).For("worker"),
	)
	if err != nil {
		return nil, err
	}
	worker, err := subagent.FromFactory("worker", "Does one part.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(p, agent.WithName("worker"))
	})
	if err != nil {
		return nil, err
	}
	return agent.NewReact(p, agent.WithName("lead"), agent.WithTools(worker))
}

// background is a lead that starts two surveys as background jobs, tells
// each where else to look while it works, and waits for both. A survey
// walks its bank one stretch a step until the lead's message reaches it,
// at a step boundary, then reports.
func background(sc scripted) (agent.Agent, error) {
	steered := make(chan struct{}) // closed when the lead sends its messages
	var once sync.Once
	p, err := sc.provider(
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			count("lead")
			var jobs []string
			for _, m := range req.Messages {
				var r struct {
					JobID  string `json:"job_id"`
					Status string `json:"status"`
				}
				if m.Role == provider.RoleTool && json.Unmarshal([]byte(m.Content), &r) == nil && r.Status == subagent.JobRunning {
					jobs = append(jobs, r.JobID)
				}
			}
			switch results(req) {
			case 0:
				return reply(req, "Two surveys, in the background.",
					call(subagent.SpawnToolName, `{"task":"Survey the north bank.","background":true}`),
					call(subagent.SpawnToolName, `{"task":"Survey the south bank.","background":true}`))
			case 2:
				once.Do(func() { close(steered) })
				return reply(req, "Steering them.",
					call(subagent.JobsToolName, `{"action":"send","job_id":"`+jobs[0]+`","message":"Count the bridges too."}`),
					call(subagent.JobsToolName, `{"action":"send","job_id":"`+jobs[1]+`","message":"Note the ferry stops."}`))
			case 4:
				return reply(req, "", call(subagent.JobsToolName, `{"action":"wait","timeout_seconds":60}`))
			}
			return reply(req, "Both banks are surveyed, bridges and ferry stops included.")
		}).For("lead"),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			count("survey")
			for _, m := range req.Messages {
				if _, said, ok := strings.Cut(m.Content, "from the agent that started you:\n"); ok && m.Role == provider.RoleUser {
					return reply(req, "Surveyed, as asked: "+said)
				}
			}
			return reply(req, "Walking the next stretch.", call("walk", `{}`))
		}).For(subagent.DefaultForkName),
	)
	if err != nil {
		return nil, err
	}
	// A stretch is walked at once until the lead has steered the surveys,
	// then in 50 ms, so that its message reaches a survey within a few
	// steps.
	walk := tool.Func{
		Def: tool.Definition{Name: "walk", Description: "Walks the next stretch of the bank.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
			select {
			case <-steered:
				time.Sleep(50 * time.Millisecond)
			case <-ctx.Done():
				return tool.Result{}, ctx.Err()
			}
			return tool.Result{Content: "nothing of note"}, nil
		},
	}
	reg, err := tool.NewRegistry(walk)
	if err != nil {
		return nil, err
	}
	sp, err := subagent.NewSpawner(p, reg, subagent.WithBackground(), subagent.WithChildMaxSteps(100))
	if err != nil {
		return nil, err
	}
	if err := reg.Register(sp); err != nil {
		return nil, err
	}
	if err := reg.Register(sp.JobsTool()); err != nil {
		return nil, err
	}
	return agent.NewReact(p, agent.WithName("lead"), agent.WithRegistry(reg))
}

// counted is how many calls each scripted model answered, and the tokens
// each billed.
var counted = struct {
	mu     sync.Mutex
	calls  map[string]int64
	billed map[string]provider.Usage
}{calls: map[string]int64{}, billed: map[string]provider.Usage{}}

// billed adds what each answer of model, the model of agent, reports it
// used to what agent billed.
func billed(agent string, model func(context.Context, provider.Request) (provider.Response, error)) func(context.Context, provider.Request) (provider.Response, error) {
	return func(ctx context.Context, req provider.Request) (provider.Response, error) {
		resp, err := model(ctx, req)
		if err == nil {
			counted.mu.Lock()
			b := counted.billed[agent]
			b.InputTokens += resp.Usage.InputTokens
			b.OutputTokens += resp.Usage.OutputTokens
			counted.billed[agent] = b
			counted.mu.Unlock()
		}
		return resp, err
	}
}

// count counts a call of the model of agent.
func count(agent string) {
	counted.mu.Lock()
	counted.calls[agent]++
	counted.mu.Unlock()
}

// The scripted models: each answers from the conversation it is sent.

func lead(ctx context.Context, req provider.Request) (provider.Response, error) {
	count("lead")
	if hasResults(req) {
		return reply(req, "Here is the report: the tram extension pays for itself, and the write-up is out.")
	}
	return reply(req, "I will split the work.",
		call("researcher", `{"task":"How much would the extension cost?"}`),
		call("researcher", `{"task":"How many riders would it carry?"}`),
		call("editor", `{"task":"Write up and publish the findings."}`))
}

func researcher(ctx context.Context, req provider.Request) (provider.Response, error) {
	count("researcher")
	task := req.Messages[0].Content
	if strings.Contains(task, "cost") {
		return reply(req, "About 90 million euros, paid back in 25 years.")
	}
	return reply(req, "About 18,000 riders a day.")
}

func editor(ctx context.Context, req provider.Request) (provider.Response, error) {
	count("editor")
	switch results(req) {
	case 0:
		return reply(req, "Let me check the main claim first.", call("fact_checker", `{"task":"Is 90 million euros plausible for 4 km of tram?"}`))
	case 1:
		return reply(req, "The claim holds; publishing.", call("publish", `{"title":"Tram extension"}`))
	}
	return reply(req, "Written up and published.")
}

func factChecker(ctx context.Context, req provider.Request) (provider.Response, error) {
	count("fact_checker")
	return reply(req, "Plausible: recent European lines cost 20 to 25 million euros a kilometre.")
}

func hasResults(req provider.Request) bool { return results(req) > 0 }

func results(req provider.Request) int {
	n := 0
	for _, m := range req.Messages {
		if m.Role == provider.RoleTool {
			n++
		}
	}
	return n
}

var calls atomic.Int64

func call(name, args string) provider.ToolCall {
	return provider.ToolCall{ID: fmt.Sprintf("call_%d", calls.Add(1)), Name: name, Arguments: json.RawMessage(args)}
}

func reply(req provider.Request, text string, tcs ...provider.ToolCall) (provider.Response, error) {
	msg := provider.AssistantMessage(text, tcs...)
	return provider.Response{Message: msg, Usage: fake.Usage(req, msg), Model: "demo-model"}, nil
}
