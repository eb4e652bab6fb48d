package a2a_test

import (
	"context"
	"net/http"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
)

// docs/a2a.md quotes the snippets below; the test in
// examples/internal/readme checks that it does, and this module's build
// checks that they compile.

// snippet of docs/a2a.md
// serveExpert serves an agent to other services, whatever their kit or
// language. Each task gets an agent of its own, so that nothing one client
// tells it reaches another. Its tasks, and the questions they wait on, live
// in st.
func serveExpert(p provider.Provider, st *store.Store) error {
	expert := func(ctx context.Context, t a2a.Task) (agent.Agent, error) {
		return agent.NewReact(p, agent.WithName("billing"))
	}
	srv, err := a2a.NewPerTask(expert, a2a.WithName("billing"),
		a2a.WithDescription("Answers billing questions."), a2a.WithStore(st))
	if err != nil {
		return err
	}
	defer srv.Close()
	return http.ListenAndServe("127.0.0.1:8790", srv)
}

// delegateAcross gives a lead a sub-agent that lives in another service.
func delegateAcross(ctx context.Context, p provider.Provider) (agent.Output, error) {
	remote, err := a2a.Connect(ctx, "http://127.0.0.1:8790")
	if err != nil {
		return agent.Output{}, err
	}
	defer remote.Close()
	billing, err := remote.Tool() // validated, capped and journaled like any child
	if err != nil {
		return agent.Output{}, err
	}
	lead, err := agent.NewReact(p, agent.WithTools(billing))
	if err != nil {
		return agent.Output{}, err
	}
	return lead.Run(ctx, agent.Input{Text: "Why was I charged twice?"})
}

// end of snippet

var _, _ = serveExpert, delegateAcross
