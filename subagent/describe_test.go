package subagent

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
)

type Meta struct{ Phase complex64 }

type measurement struct {
	Meta
	Value float64
}

// OutputOf refuses a type it cannot describe to a model with an error that
// names the field (an embedded struct's too), instead of panicking, in
// every constructor that takes it.
func TestOutputOfRefusesATypeJSONCannotHold(t *testing.T) {
	p := fake.NewProvider()
	for name, build := range map[string]func() error{
		"FromAgent": func() error {
			_, err := FromAgent("expert", "", newReact(t, p), OutputOf[measurement]())
			return err
		},
		"FromFactory": func() error {
			_, err := FromFactory("expert", "", func(context.Context, json.RawMessage) (agent.Agent, error) { return nil, nil }, OutputOf[measurement]())
			return err
		},
		"FromReact": func() error {
			_, err := FromReact("expert", "", p, nil, OutputOf[measurement]())
			return err
		},
		"NewSpawner": func() error {
			_, err := NewSpawner(p, nil, OutputOf[measurement]())
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("%s panicked: %v", name, p)
					}
				}()
				err = build()
			}()
			if err == nil || !strings.Contains(err.Error(), "field Meta.Phase of subagent.measurement: its type complex64 is a complex number") {
				t.Fatalf("%s: %v; want an error naming the field", name, err)
			}
		})
	}
}
