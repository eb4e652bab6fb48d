package openai_test

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
	"github.com/deputy-go/deputy/provider/openai"
)

func TestNewRejectsBadOptions(t *testing.T) {
	cases := []struct {
		name string
		opts []openai.Option
		env  map[string]string
		want string
	}{
		{"negative retries", []openai.Option{openai.WithMaxRetries(-2)}, nil, "pass 0 to disable retries"},
		{"negative retry time", []openai.Option{openai.WithRetryTime(-time.Second)}, nil, "pass 0 to try a failing call once"},
		{"nil logger", []openai.Option{openai.WithLogger(nil)}, nil, "leave the option out to log nothing"},
		{"retry time without admission", []openai.Option{openai.WithAPIKey("k"), openai.WithRetryTime(time.Second), openai.WithoutAdmission()}, nil, "WithRetryTime and WithoutAdmission"},
		{"logger and an admission of its own", []openai.Option{openai.WithAPIKey("k"), openai.WithLogger(slog.Default()), openai.WithAdmission(mustAdmission(t))}, nil, "provider.WithLogger"},
		{"empty key", []openai.Option{openai.WithAPIKey("")}, nil, "leave the option out to use OPENAI_API_KEY"},
		{"empty model", []openai.Option{openai.WithModel("")}, nil, "pass a model name"},
		{"relative base URL", []openai.Option{openai.WithBaseURL("localhost:11434/v1")}, nil, "the scheme must be http or https"},
		{"base URL without host", []openai.Option{openai.WithBaseURL("http:///v1")}, nil, "no host"},
		{"nil HTTP client", []openai.Option{openai.WithHTTPClient(nil)}, nil, "nil client"},
		{"bad OPENAI_BASE_URL", nil, map[string]string{"OPENAI_BASE_URL": "ftp://example.com"}, "OPENAI_BASE_URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			p, err := openai.New(tc.opts...)
			if err == nil {
				t.Fatalf("New returned %v and no error", p)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "openai: ") {
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
		_, req, err := decodeRequest(mustRead(t, r))
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		gotAuth, gotModel = r.Header.Get("Authorization"), req.Model
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
	}))
	defer srv.Close()

	clearEnv(t)
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	t.Setenv("OPENAI_MODEL", "llama3.2")
	p, err := openai.New()
	if err != nil {
		t.Fatal(err)
	}
	if p.Model() != "llama3.2" || p.BaseURL() != srv.URL {
		t.Errorf("Model() = %q, BaseURL() = %q; want the environment's", p.Model(), p.BaseURL())
	}
	if _, err := p.Complete(t.Context(), provider.Request{Messages: []provider.Message{provider.UserMessage("hi")}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if gotAuth != "Bearer sk-from-env" || gotModel != "llama3.2" {
		t.Errorf("sent Authorization %q and model %q; want OPENAI_API_KEY and OPENAI_MODEL", gotAuth, gotModel)
	}

	mu.Unlock()

	// Options win over the environment; a request's model wins over both.
	p, err = openai.New(openai.WithModel("qwen3"), openai.WithBaseURL(srv.URL), openai.WithAPIKey("sk-option"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Complete(t.Context(), provider.Request{Model: "phi4", Messages: []provider.Message{provider.UserMessage("hi")}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if gotAuth != "Bearer sk-option" || gotModel != "phi4" {
		t.Errorf("sent Authorization %q and model %q; want the option's key and the request's model", gotAuth, gotModel)
	}
}

func TestNewDefaults(t *testing.T) {
	clearEnv(t)
	// OpenAI's own server with no key refuses every call: New says so.
	if _, err := openai.New(); err == nil || !strings.Contains(err.Error(), "set OPENAI_API_KEY or pass WithAPIKey") {
		t.Fatalf("New() with no key and no base URL: %v, want an error saying what to set", err)
	}
	t.Setenv("OPENAI_API_KEY", "sk-test")
	p, err := openai.New()
	if err != nil {
		t.Fatal(err)
	}
	if p.Model() != openai.DefaultModel || p.BaseURL() != "https://api.openai.com/v1/" {
		t.Errorf("Model() = %q, BaseURL() = %q; want the defaults", p.Model(), p.BaseURL())
	}
	// An empty OPENAI_BASE_URL counts as unset.
	t.Setenv("OPENAI_BASE_URL", "")
	if p, err = openai.New(); err != nil || p.BaseURL() != "https://api.openai.com/v1/" {
		t.Errorf("New() with empty OPENAI_BASE_URL = %v, %v; want the default base URL", p, err)
	}
}

func mustRead(t *testing.T, r *http.Request) []byte {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Error(err)
	}
	return b
}

func mustAdmission(t *testing.T) *provider.Admission {
	a, err := provider.NewAdmission()
	if err != nil {
		t.Fatal(err)
	}
	return a
}
