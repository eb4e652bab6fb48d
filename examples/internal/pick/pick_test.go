package pick_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/openai"
)

var envKeys = []string{
	"DEPUTY_PROVIDER",
	"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_CUSTOM_HEADERS",
	"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL", "ANTHROPIC_PROFILE", "ANTHROPIC_CUSTOM_HEADERS",
}

func clearEnv(t *testing.T) {
	t.Helper()
	for _, k := range envKeys {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
}

var fake = provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
	return provider.Response{}, nil
})

func TestProvider(t *testing.T) {
	cases := []struct {
		name     string
		env      map[string]string
		wantType string // "fake", "openai" or "anthropic"
		wantDesc string
		wantErr  string
	}{
		{name: "nothing set", wantType: "fake", wantDesc: pick.FakeDescription},
		{name: "fake asked for", env: map[string]string{"DEPUTY_PROVIDER": "fake", "OPENAI_BASE_URL": "http://localhost:11434/v1"}, wantType: "fake", wantDesc: pick.FakeDescription},
		{name: "openai", env: map[string]string{"DEPUTY_PROVIDER": "openai", "OPENAI_API_KEY": "sk-test"},
			wantType: "openai", wantDesc: "provider: openai (" + openai.DefaultModel + ")"},
		{name: "openai with model, any case", env: map[string]string{"DEPUTY_PROVIDER": " OpenAI ", "OPENAI_API_KEY": "sk-test", "OPENAI_MODEL": "gpt-5.5"},
			wantType: "openai", wantDesc: "provider: openai (gpt-5.5)"},
		{name: "ollama without DEPUTY_PROVIDER", env: map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1", "OPENAI_MODEL": "qwen3"},
			wantType: "openai", wantDesc: "provider: openai (qwen3 at http://localhost:11434/v1)"},
		{name: "ollama without a model", env: map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1"},
			wantErr: "needs OPENAI_MODEL"},
		{name: "openai without key", env: map[string]string{"DEPUTY_PROVIDER": "openai"}, wantErr: "needs OPENAI_API_KEY"},
		{name: "openai with bad base URL", env: map[string]string{"OPENAI_BASE_URL": "localhost:11434", "OPENAI_MODEL": "qwen3"}, wantErr: "http or https"},
		{name: "anthropic", env: map[string]string{"DEPUTY_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "sk-ant-test"},
			wantType: "anthropic", wantDesc: "provider: anthropic (" + anthropic.DefaultModel + ")"},
		{name: "anthropic with model", env: map[string]string{"DEPUTY_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_MODEL": "claude-haiku-5-5"},
			wantType: "anthropic", wantDesc: "provider: anthropic (claude-haiku-5-5)"},
		{name: "anthropic without key", env: map[string]string{"DEPUTY_PROVIDER": "anthropic"}, wantErr: "needs ANTHROPIC_API_KEY"},
		{name: "unknown provider", env: map[string]string{"DEPUTY_PROVIDER": "gemini"}, wantErr: `DEPUTY_PROVIDER="gemini" is not a provider`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			p, desc, err := pick.Provider(fake)
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
			var got string
			switch p.(type) {
			case *openai.Provider:
				got = "openai"
			case *anthropic.Provider:
				got = "anthropic"
			case provider.Func:
				got = "fake"
			}
			if got != tc.wantType {
				t.Errorf("picked %T; want %s", p, tc.wantType)
			}
		})
	}
}

func TestProviderNeedsFallback(t *testing.T) {
	clearEnv(t)
	if _, _, err := pick.Provider(nil); err == nil {
		t.Error("got no error for a nil fallback")
	}
}
