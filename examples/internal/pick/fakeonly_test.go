//go:build !realmodel

package pick_test

import (
	"strings"
	"testing"

	"github.com/deputy-go/deputy/examples/internal/pick"
)

// Without the realmodel tag no vendor SDK is linked: an environment that asks
// for a real model gets the fake, and the first line says how to get the
// real one.
func TestFromEnvWithoutRealModels(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"ollama", map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1", "OPENAI_MODEL": "qwen3"}, "OPENAI_BASE_URL is set, but openai needs"},
		{"openai", map[string]string{"DEPUTY_PROVIDER": "openai", "OPENAI_API_KEY": "sk-test"}, "DEPUTY_PROVIDER=openai is set"},
		{"anthropic", map[string]string{"DEPUTY_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "sk-ant-test"}, "DEPUTY_PROVIDER=anthropic is set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, desc, err := pick.FromEnv(env(tc.env), fake)
			if err != nil {
				t.Fatal(err)
			}
			if !isFake(p) {
				t.Errorf("picked %T; want the fake", p)
			}
			for _, want := range []string{"provider: fake", tc.want, "go run -tags realmodel"} {
				if !strings.Contains(desc, want) {
					t.Errorf("description %q does not say %q", desc, want)
				}
			}
		})
	}
}
