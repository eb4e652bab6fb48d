package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/tool"
)

// TestOptionsRefusedWhereIgnored builds each form with each Option. A form
// that uses the option is built; one that would ignore it fails, with an
// error that names the option and the form, so that a user never believes
// a setting holds that does nothing.
func TestOptionsRefusedWhereIgnored(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "deputy.db"))
	p := fake.NewProvider()
	input := func(args json.RawMessage) (agent.Input, error) { return agent.Input{Text: string(args)}, nil }
	render := func(_ context.Context, o Outcome) (string, error) { return o.Content, nil }

	const (
		all   = formAgent | formFactory | formReact | formSpawn
		tools = formAgent | formFactory | formReact
	)
	options := []struct {
		name string
		opt  Option
		used form // the forms that take it
	}{
		{"WithMaxDepth", WithMaxDepth(2), all},
		{"WithMaxOutputBytes", WithMaxOutputBytes(1024), all},
		{"WithTimeout", WithTimeout(time.Minute), all},
		{"WithReport", WithReport(), all},
		{"WithOutputSchema", WithOutputSchema(json.RawMessage(`{"type":"object"}`)), all},
		{"OutputOf", OutputOf[Report](), all},
		{"WithRender", WithRender(render), all},
		{"WithRefuseWhenBusy", WithRefuseWhenBusy(), formAgent},
		{"WithStore", WithStore(st, "expert"), formAgent},
		{"WithInputFromArgs", WithInputFromArgs(input), tools},
		{"WithParams", WithParams(json.RawMessage(TaskParams)), tools},
		{"WithReactOptions", WithReactOptions(agent.WithMaxSteps(3)), formReact | formSpawn},
	}
	build := map[form]func(Option) error{
		formAgent: func(o Option) error {
			_, err := FromAgent("expert", "", newReact(t, p), o)
			return err
		},
		formFactory: func(o Option) error {
			_, err := FromFactory("expert", "", func(context.Context, json.RawMessage) (agent.Agent, error) { return nil, nil }, o)
			return err
		},
		formReact: func(o Option) error {
			_, err := FromReact("expert", "", p, nil, o)
			return err
		},
		formSpawn: func(o Option) error {
			_, err := NewSpawner(p, nil, o)
			return err
		},
	}
	for _, o := range options {
		for _, f := range []form{formAgent, formFactory, formReact, formSpawn} {
			t.Run(o.name+"/"+f.String(), func(t *testing.T) {
				err := build[f](o.opt)
				if o.used&f != 0 {
					if err != nil {
						t.Fatalf("%s refused %s, which it uses: %v", f, o.name, err)
					}
					return
				}
				if err == nil {
					t.Fatalf("%s accepted %s, which it would ignore", f, o.name)
				}
				msg := err.Error()
				for _, want := range []string{o.name, f.String() + " would ignore it"} {
					if !strings.Contains(msg, want) {
						t.Errorf("error %q does not say %q", msg, want)
					}
				}
			})
		}
	}
}

// TestRefusalMessage pins one refusal in full: it names the tool, the
// option, where the option belongs and the form that would ignore it.
func TestRefusalMessage(t *testing.T) {
	_, err := FromAgent("expert", "", newReact(t, fake.NewProvider()), WithReactOptions(agent.WithMaxSteps(3)))
	want := `subagent "expert": WithReactOptions configures the children of FromReact and the spawn tool's forks; FromAgent would ignore it`
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// TestNilOptionsIgnored: a nil option, of either type, is skipped by every
// constructor, as by the other packages' constructors.
func TestNilOptionsIgnored(t *testing.T) {
	p := fake.NewProvider()
	var nilOpt Option
	if _, err := FromAgent("expert", "", newReact(t, p), nil, nilOpt); err != nil {
		t.Errorf("FromAgent: %v", err)
	}
	if _, err := FromReact("expert", "", p, nil, nil); err != nil {
		t.Errorf("FromReact: %v", err)
	}
	var nilSpawn SpawnOption
	if _, err := NewSpawner(p, nil, nil, nilSpawn, nilOpt); err != nil {
		t.Errorf("NewSpawner: %v", err)
	}
}

// A tool built with WithParams advertises and enforces that schema.
func TestWithParams(t *testing.T) {
	params := json.RawMessage(`{"type":"object","properties":{"topic":{"type":"string"}},"required":["topic"]}`)
	p := fake.NewProvider(fake.Text("done").For("child"))
	sub := must(FromReact("child", "d", p, nil, WithParams(params), WithInputFromArgs(func(args json.RawMessage) (agent.Input, error) {
		return agent.Input{Text: string(args)}, nil
	})))(t)
	if got := string(sub.Definition().Parameters); got != string(params) {
		t.Errorf("parameters %s, want %s", got, params)
	}
	if _, err := callTool(t.Context(), sub, "call_1", `{"task":"no topic"}`); !errors.Is(err, tool.ErrInvalidArguments) {
		t.Errorf("a call without the required topic: %v, want tool.ErrInvalidArguments", err)
	}
	if _, err := callTool(t.Context(), sub, "call_2", `{"topic":"tides"}`); err != nil {
		t.Errorf("a call with the topic: %v", err)
	}
}
