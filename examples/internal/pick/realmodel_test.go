//go:build realmodel

package pick_test

import (
	"strings"
	"testing"

	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/openai"
)

// With the realmodel tag, an environment that asks for a real model gets it
// from fromenv (whose own tests cover every variable), errors included; the
// fake stays for an environment that asks for none.
func TestFromEnvRealModels(t *testing.T) {
	cases := []struct {
		name     string
		env      map[string]string
		wantType string // "openai", "anthropic" or "fake"
		wantDesc string
		wantErr  string
	}{
		{name: "openai", env: map[string]string{"DEPUTY_PROVIDER": "openai", "OPENAI_API_KEY": "sk-test"},
			wantType: "openai", wantDesc: "provider: openai (" + openai.DefaultModel + ")"},
		{name: "ollama without DEPUTY_PROVIDER", env: map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1", "OPENAI_MODEL": "qwen3"},
			wantType: "openai", wantDesc: "provider: openai (qwen3 at http://localhost:11434/v1)"},
		{name: "anthropic", env: map[string]string{"DEPUTY_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "sk-ant-test"},
			wantType: "anthropic", wantDesc: "provider: anthropic (" + anthropic.DefaultModel + ")"},
		{name: "fake despite a base URL", env: map[string]string{"DEPUTY_PROVIDER": "fake", "OPENAI_BASE_URL": "http://localhost:11434/v1"},
			wantType: "fake", wantDesc: pick.FakeDescription},
		{name: "nothing set", wantType: "fake", wantDesc: pick.FakeDescription},
		{name: "ollama without a model", env: map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1"},
			wantErr: "needs OPENAI_MODEL"},
		{name: "anthropic without key", env: map[string]string{"DEPUTY_PROVIDER": "anthropic"}, wantErr: "needs ANTHROPIC_API_KEY"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, desc, err := pick.FromEnv(env(tc.env), fake)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v; want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if desc != tc.wantDesc {
				t.Errorf("description %q; want %q", desc, tc.wantDesc)
			}
			got := "fake"
			switch p.(type) {
			case *openai.Provider:
				got = "openai"
			case *anthropic.Provider:
				got = "anthropic"
			}
			if got != tc.wantType || got == "fake" && !isFake(p) {
				t.Errorf("picked %T; want %s", p, tc.wantType)
			}
		})
	}
}
