//go:build realmodel

package pick

import (
	"fmt"
	"net/url"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/openai"
)

// The vendors' own servers. The base URL and the model are always passed to
// New, so that the environment given to FromEnv is the only one read.
const (
	openaiURL    = "https://api.openai.com/v1/"
	anthropicURL = "https://api.anthropic.com/"
)

// localKey is sent to a local server that needs no API key; the SDKs want
// one and such servers ignore it.
const localKey = "local"

// vendor builds the provider the environment asks for.
func vendor(kind string, getenv func(string) string, _ provider.Provider) (provider.Provider, string, error) {
	if kind == "anthropic" {
		return anthropicFrom(getenv)
	}
	return openaiFrom(getenv)
}

func openaiFrom(getenv func(string) string) (provider.Provider, string, error) {
	key, baseURL, model := getenv("OPENAI_API_KEY"), getenv("OPENAI_BASE_URL"), getenv("OPENAI_MODEL")
	var opts []openai.Option
	switch {
	case key != "":
		opts = append(opts, openai.WithAPIKey(key))
	case baseURL != "":
		opts = append(opts, openai.WithAPIKey(localKey))
	default:
		return nil, "", fmt.Errorf("pick: DEPUTY_PROVIDER=openai needs OPENAI_API_KEY, or OPENAI_BASE_URL for a local server such as Ollama (http://localhost:11434/v1)")
	}
	local := baseURL != ""
	if local {
		if err := checkURL("OPENAI_BASE_URL", baseURL, "http://localhost:11434/v1"); err != nil {
			return nil, "", err
		}
		if model == "" {
			return nil, "", fmt.Errorf("pick: OPENAI_BASE_URL=%s needs OPENAI_MODEL, a model that server serves (e.g. OPENAI_MODEL=qwen3 after ollama pull qwen3)", baseURL)
		}
	} else {
		baseURL = openaiURL
	}
	if model == "" {
		model = openai.DefaultModel
	}
	opts = append(opts, openai.WithBaseURL(baseURL), openai.WithModel(model))
	p, err := openai.New(opts...)
	if err != nil {
		return nil, "", fmt.Errorf("pick: %w", err)
	}
	desc := fmt.Sprintf("provider: openai (%s)", p.Model())
	if local {
		desc = fmt.Sprintf("provider: openai (%s at %s)", p.Model(), p.BaseURL())
	}
	return p, desc, nil
}

func anthropicFrom(getenv func(string) string) (provider.Provider, string, error) {
	key, baseURL, model := getenv("ANTHROPIC_API_KEY"), getenv("ANTHROPIC_BASE_URL"), getenv("ANTHROPIC_MODEL")
	var opts []anthropic.Option
	switch {
	case key != "":
		opts = append(opts, anthropic.WithAPIKey(key))
	case baseURL != "":
		opts = append(opts, anthropic.WithAPIKey(localKey))
	default:
		return nil, "", fmt.Errorf("pick: DEPUTY_PROVIDER=anthropic needs ANTHROPIC_API_KEY, or ANTHROPIC_BASE_URL for a local Anthropic-compatible server")
	}
	local := baseURL != ""
	if local {
		if err := checkURL("ANTHROPIC_BASE_URL", baseURL, "http://localhost:8080"); err != nil {
			return nil, "", err
		}
	} else {
		baseURL = anthropicURL
	}
	if model == "" {
		model = anthropic.DefaultModel
	}
	opts = append(opts, anthropic.WithBaseURL(baseURL), anthropic.WithModel(model))
	p, err := anthropic.New(opts...)
	if err != nil {
		return nil, "", fmt.Errorf("pick: %w", err)
	}
	desc := fmt.Sprintf("provider: anthropic (%s)", p.Model())
	if local {
		desc = fmt.Sprintf("provider: anthropic (%s at %s)", p.Model(), p.BaseURL())
	}
	return p, desc, nil
}

// checkURL reports a base URL the SDKs could not use, naming the variable
// that holds it.
func checkURL(name, value, example string) error {
	u, err := url.Parse(value)
	switch {
	case err != nil:
		return fmt.Errorf("pick: %s=%q is not a URL (%v); set it to the server's URL, e.g. %s", name, value, err, example)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("pick: %s=%q: the scheme must be http or https; set it to the server's URL, e.g. %s", name, value, example)
	case u.Host == "":
		return fmt.Errorf("pick: %s=%q has no host; set it to the server's URL, e.g. %s", name, value, example)
	}
	return nil
}
