//go:build realmodel

package pick_test

import (
	"strings"
	"testing"

	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/openai"
)

func TestFromEnvRealModels(t *testing.T) {
	cases := []struct {
		name     string
		env      map[string]string
		wantType string // "openai" or "anthropic"
		wantDesc string
		wantErr  string
	}{
		{name: "openai", env: map[string]string{"DEPUTY_PROVIDER": "openai", "OPENAI_API_KEY": "sk-test"},
			wantType: "openai", wantDesc: "provider: openai (" + openai.DefaultModel + ")"},
		{name: "openai with model, any case", env: map[string]string{"DEPUTY_PROVIDER": " OpenAI ", "OPENAI_API_KEY": "sk-test", "OPENAI_MODEL": "gpt-5.5"},
			wantType: "openai", wantDesc: "provider: openai (gpt-5.5)"},
		{name: "ollama without DEPUTY_PROVIDER", env: map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1", "OPENAI_MODEL": "qwen3"},
			wantType: "openai", wantDesc: "provider: openai (qwen3 at http://localhost:11434/v1)"},
		{name: "ollama without a model", env: map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1"},
			wantErr: "needs OPENAI_MODEL"},
		{name: "openai without key", env: map[string]string{"DEPUTY_PROVIDER": "openai"}, wantErr: "needs OPENAI_API_KEY"},
		// The error names the variable the user set, not an option they never called.
		{name: "openai with bad base URL", env: map[string]string{"OPENAI_BASE_URL": "localhost:11434", "OPENAI_MODEL": "qwen3"},
			wantErr: `OPENAI_BASE_URL="localhost:11434"`},
		{name: "openai base URL without host", env: map[string]string{"OPENAI_BASE_URL": "http:///v1", "OPENAI_MODEL": "qwen3"},
			wantErr: `OPENAI_BASE_URL="http:///v1" has no host`},
		{name: "anthropic", env: map[string]string{"DEPUTY_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "sk-ant-test"},
			wantType: "anthropic", wantDesc: "provider: anthropic (" + anthropic.DefaultModel + ")"},
		{name: "anthropic with model", env: map[string]string{"DEPUTY_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_MODEL": "claude-haiku-5-5"},
			wantType: "anthropic", wantDesc: "provider: anthropic (claude-haiku-5-5)"},
		// A local Anthropic-compatible server needs no key.
		{name: "anthropic local server", env: map[string]string{"DEPUTY_PROVIDER": "anthropic", "ANTHROPIC_BASE_URL": "http://localhost:8080", "ANTHROPIC_MODEL": "local-model"},
			wantType: "anthropic", wantDesc: "provider: anthropic (local-model at http://localhost:8080)"},
		{name: "anthropic with bad base URL", env: map[string]string{"DEPUTY_PROVIDER": "anthropic", "ANTHROPIC_BASE_URL": "ftp://example.com"},
			wantErr: `ANTHROPIC_BASE_URL="ftp://example.com": the scheme must be http or https`},
		{name: "anthropic without key", env: map[string]string{"DEPUTY_PROVIDER": "anthropic"}, wantErr: "needs ANTHROPIC_API_KEY"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, desc, err := pick.FromEnv(env(tc.env), fake)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v; want one saying %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "WithBaseURL") {
					t.Errorf("error %q names an option the user never called", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if desc != tc.wantDesc {
				t.Errorf("description %q; want %q", desc, tc.wantDesc)
			}
			var got string
			switch p.(type) {
			case *openai.Provider:
				got = "openai"
			case *anthropic.Provider:
				got = "anthropic"
			}
			if got != tc.wantType {
				t.Errorf("picked %T; want %s", p, tc.wantType)
			}
		})
	}
}
