package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A turn resumed after a crash: the children that had finished are
// answered from the journal, at no cost, and only the others run. Here the
// first run fails at its second child, as a crashed process would stop;
// the second run of the same turn, under the same journal name, runs only
// that child.
func Example_resumeAfterACrash() {
	dir, _ := os.MkdirTemp("", "journal-example")
	defer os.RemoveAll(dir)
	b, err := sqlite.Open(filepath.Join(dir, "deputy.db"))
	if err != nil {
		log.Fatal(err)
	}
	st, _ := store.New(b)
	defer st.Close()

	// One lead model for both tries: the second try does not ask it again
	// for the answers the journal holds.
	leadModel := fake.NewProvider(
		fake.Call("worker", `{"task":"first"}`),
		fake.Call("worker", `{"task":"second"}`),
		fake.Text("both done"),
	)
	resume := func(script func(stop func()) *fake.Provider) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		childModel := script(cancel)
		worker, _ := subagent.FromFactory("worker", "Does one task.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(childModel, agent.WithName("worker"))
		})
		lead, _ := agent.NewReact(leadModel, agent.WithName("lead"), agent.WithTools(worker))
		j, err := st.Journal(ctx, "request-42") // the same name on every try
		if err != nil {
			log.Fatal(err)
		}
		out, err := lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
		fmt.Printf("answer %q, worker model calls %d, error %v\n", out.Answer, childModel.Calls(), err != nil)
	}
	// The first try stops while the second child runs.
	resume(func(stop func()) *fake.Provider {
		return fake.NewProvider(fake.Text("first done"), fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			stop()
			return provider.Response{}, ctx.Err()
		}))
	})
	resume(func(func()) *fake.Provider { return fake.NewProvider(fake.Text("second done")) })
	// Output:
	// answer "", worker model calls 2, error true
	// answer "both done", worker model calls 1, error false
}

// A resident expert whose conversation is kept in a store: a second
// instance, as after a restart, continues the conversation.
func ExampleWithStore() {
	dir, _ := os.MkdirTemp("", "store-example")
	defer os.RemoveAll(dir)
	b, err := sqlite.Open(filepath.Join(dir, "deputy.db"))
	if err != nil {
		log.Fatal(err)
	}
	st, _ := store.New(b)
	defer st.Close()

	// A model that says how many messages it was sent.
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage(fmt.Sprintf("I have seen %d messages.", len(req.Messages)))}, nil
	})
	for range 2 { // two processes, one after the other
		expert, _ := agent.NewReact(model, agent.WithName("ledger"))
		t, err := subagent.FromAgent("ledger", "Knows the ledger.", expert, subagent.WithStore(st, "experts/ledger"))
		if err != nil {
			log.Fatal(err)
		}
		res, err := t.Call(context.Background(), tool.Call{ID: "c", Name: "ledger", Arguments: json.RawMessage(`{"task":"What is the total?"}`)})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Content)
	}
	// Output:
	// I have seen 1 messages.
	// I have seen 3 messages.
}
