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

// OutputOf refuses a type it cannot describe to a model with an error that
// names the field, instead of panicking.
func TestOutputOfRefusesATypeJSONCannotHold(t *testing.T) {
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("NewReact panicked: %v", p)
			}
		}()
		_, err = agent.NewReact(fake.NewProvider(), agent.OutputOf[verdict]())
	}()
	if !errors.Is(err, agent.ErrInvalidOption) || !strings.Contains(err.Error(), "field Notes[].Fixes[key] of agent_test.verdict: its type func() string is a function") {
		t.Fatalf("NewReact: %v; want an invalid option naming the field", err)
	}
}
