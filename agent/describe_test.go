package agent_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
)

type verdict struct {
	OK    bool
	Notes []struct {
		Line  int
		Fixes map[string]func() string
	}
}

type progress struct {
	Status  string
	Updates chan string
}

// OutputOf refuses a type it cannot describe to a model with an error that
// names the field, instead of panicking: a func in a map in a slice, and
// a chan.
func TestOutputOfRefusesATypeJSONCannotHold(t *testing.T) {
	for name, c := range map[string]struct {
		opt  agent.Option
		want string
	}{
		"func": {agent.OutputOf[verdict](), "field Notes[].Fixes[key] of agent_test.verdict: its type func() string is a function"},
		"chan": {agent.OutputOf[progress](), "field Updates of agent_test.progress: its type chan string is a channel"},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("NewReact panicked: %v", p)
					}
				}()
				_, err = agent.NewReact(fake.NewProvider(), c.opt)
			}()
			if !errors.Is(err, agent.ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("NewReact: %v; want an invalid option naming the field", err)
			}
		})
	}
}
