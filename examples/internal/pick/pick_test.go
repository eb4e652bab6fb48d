package pick_test

import (
	"context"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/provider"
)

// env is an environment for FromEnv; tests never read the process's.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

var fake = provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
	return provider.Response{}, nil
})

func isFake(p provider.Provider) bool { _, ok := p.(provider.Func); return ok }

// The choices that do not depend on the build.
func TestFromEnvFake(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{name: "nothing set"},
		{name: "fake asked for", env: map[string]string{"DEPUTY_PROVIDER": "fake", "OPENAI_BASE_URL": "http://localhost:11434/v1"}},
		{name: "fake in any case", env: map[string]string{"DEPUTY_PROVIDER": " Fake "}},
		{name: "only a key set", env: map[string]string{"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test"}},
		{name: "unknown provider", env: map[string]string{"DEPUTY_PROVIDER": "gemini"}, wantErr: `DEPUTY_PROVIDER="gemini" is not a provider`},
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
			if !isFake(p) || desc != pick.FakeDescription {
				t.Errorf("picked %T, %q; want the fake, %q", p, desc, pick.FakeDescription)
			}
		})
	}
}

func TestFromEnvNeedsFallback(t *testing.T) {
	if _, _, err := pick.FromEnv(env(nil), nil); err == nil {
		t.Error("got no error for a nil fallback")
	}
}
