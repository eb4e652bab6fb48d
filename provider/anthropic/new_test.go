package anthropic_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
)

func TestNewRejectsBadOptions(t *testing.T) {
	cases := []struct {
		name string
		opts []anthropic.Option
		env  map[string]string
		want string
	}{
		{"negative retries", []anthropic.Option{anthropic.WithMaxRetries(-1)}, nil, "pass 0 to disable retries"},
		{"negative retry time", []anthropic.Option{anthropic.WithRetryTime(-time.Second)}, nil, "pass 0 to try a failing call once"},
		{"nil logger", []anthropic.Option{anthropic.WithLogger(nil)}, nil, "leave the option out to log nothing"},
		{"retry time without admission", []anthropic.Option{anthropic.WithRetryTime(time.Second), anthropic.WithoutAdmission()}, nil, "WithRetryTime and WithoutAdmission"},
		{"logger and an admission of its own", []anthropic.Option{anthropic.WithLogger(slog.Default()), anthropic.WithAdmission(mustAdmission(t))}, nil, "provider.WithLogger"},
		{"empty key", []anthropic.Option{anthropic.WithAPIKey("")}, nil, "leave the option out to use ANTHROPIC_API_KEY"},
		{"empty model", []anthropic.Option{anthropic.WithModel("")}, nil, "pass a model name"},
		{"zero max tokens", []anthropic.Option{anthropic.WithMaxTokens(0)}, nil, "the cap must be positive"},
		{"relative base URL", []anthropic.Option{anthropic.WithBaseURL("api.anthropic.com")}, nil, "the scheme must be http or https"},
		{"nil HTTP client", []anthropic.Option{anthropic.WithHTTPClient(nil)}, nil, "nil client"},
		{"bad ANTHROPIC_BASE_URL", nil, map[string]string{"ANTHROPIC_BASE_URL": "ftp://example.com"}, "ANTHROPIC_BASE_URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			p, err := anthropic.New(tc.opts...)
			if err == nil {
				t.Fatalf("New returned %v and no error", p)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "anthropic: ") {
				t.Errorf("error %q does not name the provider", err)
			}
		})
	}
}

// TestNewReadsEnvironment checks the variables users expect to work: the SDK
// reads the key and base URL, this package the model.
func TestNewReadsEnvironment(t *testing.T) {
	var (
		mu                sync.Mutex
		gotAuth, gotModel string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, req, err := decodeRequest(body)
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		gotAuth, gotModel = r.Header.Get("Authorization")+r.Header.Get("X-Api-Key"), req.Model
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"m","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`))
	}))
	defer srv.Close()
	check := func(wantAuth, wantModel string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(gotAuth, wantAuth) || gotModel != wantModel {
			t.Errorf("sent credentials %q and model %q; want %q and %q", gotAuth, gotModel, wantAuth, wantModel)
		}
	}
	hi := provider.Request{Messages: []provider.Message{provider.UserMessage("hi")}}

	clearEnv(t)
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
	t.Setenv("ANTHROPIC_BASE_URL", srv.URL)
	t.Setenv("ANTHROPIC_MODEL", "claude-haiku-5-5")
	p, err := anthropic.New()
	if err != nil {
		t.Fatal(err)
	}
	if p.Model() != "claude-haiku-5-5" || p.BaseURL() != srv.URL {
		t.Errorf("Model() = %q, BaseURL() = %q; want the environment's", p.Model(), p.BaseURL())
	}
	if _, err := p.Complete(t.Context(), hi); err != nil {
		t.Fatal(err)
	}
	check("sk-ant-from-env", "claude-haiku-5-5")

	// Options win over the environment; a request's model wins over both.
	p, err = anthropic.New(anthropic.WithModel("claude-opus-5-5"), anthropic.WithBaseURL(srv.URL), anthropic.WithAPIKey("sk-ant-option"))
	if err != nil {
		t.Fatal(err)
	}
	hi.Model = "claude-sonnet-5"
	if _, err := p.Complete(t.Context(), hi); err != nil {
		t.Fatal(err)
	}
	check("sk-ant-option", "claude-sonnet-5")
}

func TestNewDefaults(t *testing.T) {
	clearEnv(t)
	p, err := anthropic.New()
	if err != nil {
		t.Fatal(err)
	}
	if p.Model() != anthropic.DefaultModel || p.BaseURL() != "https://api.anthropic.com/" {
		t.Errorf("Model() = %q, BaseURL() = %q; want the defaults", p.Model(), p.BaseURL())
	}
}

func mustAdmission(t *testing.T) *provider.Admission {
	a, err := provider.NewAdmission()
	if err != nil {
		t.Fatal(err)
	}
	return a
}
