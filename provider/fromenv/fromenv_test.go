package fromenv_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/fromenv"
	"github.com/deputy-go/deputy/provider/openai"
)

// env is an environment for New; tests never read the process's.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestNew(t *testing.T) {
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
		{name: "local server with a key", env: map[string]string{"DEPUTY_PROVIDER": "openai", "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "https://llm.example.com/v1", "OPENAI_MODEL": "m"},
			wantType: "openai", wantDesc: "provider: openai (m at https://llm.example.com/v1)"},
		{name: "ollama without a model", env: map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1"},
			wantErr: "needs OPENAI_MODEL"},
		{name: "openai without key", env: map[string]string{"DEPUTY_PROVIDER": "openai"}, wantErr: "needs OPENAI_API_KEY"},
		// The error names the variable the user set, not an option they never called.
		{name: "openai with bad base URL", env: map[string]string{"OPENAI_BASE_URL": "localhost:11434", "OPENAI_MODEL": "qwen3"},
			wantErr: `OPENAI_BASE_URL="localhost:11434": the scheme must be http or https`},
		{name: "openai base URL without host", env: map[string]string{"OPENAI_BASE_URL": "http:///v1", "OPENAI_MODEL": "qwen3"},
			wantErr: `OPENAI_BASE_URL="http:///v1": the URL has no host`},
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
		// Only DEPUTY_PROVIDER or OPENAI_BASE_URL asks for a provider; a key alone does not.
		{name: "anthropic base URL alone", env: map[string]string{"ANTHROPIC_BASE_URL": "http://localhost:8080"}, wantErr: "names no model provider"},
		{name: "unknown provider", env: map[string]string{"DEPUTY_PROVIDER": "gemini"}, wantErr: `DEPUTY_PROVIDER="gemini" is not a provider; use openai or anthropic`},
		{name: "fake is not a provider", env: map[string]string{"DEPUTY_PROVIDER": "fake"}, wantErr: `DEPUTY_PROVIDER="fake" is not a provider`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, desc, err := fromenv.New(env(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v; want one saying %q", err, tc.wantErr)
				}
				if !strings.HasPrefix(err.Error(), "fromenv: ") {
					t.Errorf("error %q does not start with the package name", err)
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
				t.Errorf("built %T; want %s", p, tc.wantType)
			}
		})
	}
}

// A program falls back to a provider of its own only when the environment
// names none, never when it names one that cannot work.
func TestNewNoProvider(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, true},
		{"blank DEPUTY_PROVIDER", map[string]string{"DEPUTY_PROVIDER": "  "}, true},
		{"only keys set", map[string]string{"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test"}, true},
		{"openai without key", map[string]string{"DEPUTY_PROVIDER": "openai"}, false},
		{"unknown provider", map[string]string{"DEPUTY_PROVIDER": "gemini"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _, err := fromenv.New(env(tc.env))
			if err == nil {
				t.Fatalf("built %T; want an error", p)
			}
			if got := errors.Is(err, fromenv.ErrNoProvider); got != tc.want {
				t.Errorf("errors.Is(%q, ErrNoProvider) = %v; want %v", err, got, tc.want)
			}
			if tc.want && !strings.Contains(err.Error(), "set DEPUTY_PROVIDER") {
				t.Errorf("error %q does not say what to set", err)
			}
		})
	}
}

func TestNewNilGetenv(t *testing.T) {
	_, _, err := fromenv.New(nil)
	if err == nil || !strings.Contains(err.Error(), "pass os.Getenv") {
		t.Errorf("got error %v; want one saying to pass os.Getenv", err)
	}
}

// The environment given to New is the one read: a process environment that
// names other servers and models changes nothing.
func TestNewReadsOnlyGetenv(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "http://process.invalid/v1")
	t.Setenv("OPENAI_MODEL", "process-model")
	t.Setenv("ANTHROPIC_BASE_URL", "http://process.invalid")
	t.Setenv("ANTHROPIC_MODEL", "process-model")
	for _, tc := range []struct {
		env     map[string]string
		want    string
		wantURL string
	}{
		{map[string]string{"DEPUTY_PROVIDER": "openai", "OPENAI_API_KEY": "sk-test"},
			"provider: openai (" + openai.DefaultModel + ")", "https://api.openai.com/v1/"},
		{map[string]string{"DEPUTY_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "sk-ant-test"},
			"provider: anthropic (" + anthropic.DefaultModel + ")", "https://api.anthropic.com/"},
	} {
		p, desc, err := fromenv.New(env(tc.env))
		if err != nil {
			t.Fatal(err)
		}
		if desc != tc.want {
			t.Errorf("description %q; want %q", desc, tc.want)
		}
		if got := p.(interface{ BaseURL() string }).BaseURL(); got != tc.wantURL {
			t.Errorf("%T talks to %s; want %s", p, got, tc.wantURL)
		}
	}
}
