package fromenv

import (
	"errors"
	"fmt"
	"strings"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/internal/adapter"
	"github.com/deputy-go/deputy/provider/openai"
)

// ErrNoProvider is returned, wrapped, by New when the environment names no
// provider: DEPUTY_PROVIDER and OPENAI_BASE_URL are both unset. A program
// with a provider of its own to fall back on checks for it with errors.Is.
var ErrNoProvider = errors.New("fromenv: the environment names no model provider")

// The vendors' own servers. The base URL and the model are always passed to
// the providers' New, so that the environment given to New is the one read.
const (
	openaiURL    = "https://api.openai.com/v1/"
	anthropicURL = "https://api.anthropic.com/"
)

// localKey is sent to a local server that needs no API key; the SDKs want
// one and such servers ignore it.
const localKey = "local"

// New returns the provider that the environment, read through getenv,
// names (the package documentation lists the variables), and a one-line
// description of it such as "provider: openai (gpt-5.4-mini)" or
// "provider: openai (qwen3 at http://localhost:11434/v1)", for a program to
// print so that its output says which model produced it.
//
// The provider is an *openai.Provider or an *anthropic.Provider. New makes
// no network call. It reports an environment that names no provider with
// ErrNoProvider, and one that cannot work, such as a local server without a
// model, with an error that says which variable to set.
func New(getenv func(string) string) (provider.Provider, string, error) {
	if getenv == nil {
		return nil, "", errors.New("fromenv: New got a nil getenv; pass os.Getenv, or a lookup in a map in tests")
	}
	name := strings.ToLower(strings.TrimSpace(getenv("DEPUTY_PROVIDER")))
	switch {
	case name == "openai", name == "" && getenv("OPENAI_BASE_URL") != "":
		return openaiFrom(getenv)
	case name == "anthropic":
		return anthropicFrom(getenv)
	case name == "":
		return nil, "", fmt.Errorf("%w; set DEPUTY_PROVIDER=openai with OPENAI_API_KEY, DEPUTY_PROVIDER=anthropic with ANTHROPIC_API_KEY, or OPENAI_BASE_URL and OPENAI_MODEL for a local server such as Ollama", ErrNoProvider)
	}
	return nil, "", fmt.Errorf("fromenv: DEPUTY_PROVIDER=%q is not a provider; use openai or anthropic", name)
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
		return nil, "", errors.New("fromenv: DEPUTY_PROVIDER=openai needs OPENAI_API_KEY, or OPENAI_BASE_URL for a local server such as Ollama (http://localhost:11434/v1)")
	}
	local := baseURL != ""
	if local {
		if err := checkURL("OPENAI_BASE_URL", baseURL, "http://localhost:11434/v1"); err != nil {
			return nil, "", err
		}
		if model == "" {
			return nil, "", fmt.Errorf("fromenv: OPENAI_BASE_URL=%s needs OPENAI_MODEL, a model that server serves (e.g. OPENAI_MODEL=qwen3 after ollama pull qwen3)", baseURL)
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
		return nil, "", fmt.Errorf("fromenv: %w", err)
	}
	return p, describe("openai", p.Model(), p.BaseURL(), local), nil
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
		return nil, "", errors.New("fromenv: DEPUTY_PROVIDER=anthropic needs ANTHROPIC_API_KEY, or ANTHROPIC_BASE_URL for a local Anthropic-compatible server")
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
		return nil, "", fmt.Errorf("fromenv: %w", err)
	}
	return p, describe("anthropic", p.Model(), p.BaseURL(), local), nil
}

// describe is New's one-line description; a local server is named by its
// URL, a vendor's own by the vendor alone.
func describe(vendor, model, baseURL string, local bool) string {
	if local {
		return fmt.Sprintf("provider: %s (%s at %s)", vendor, model, baseURL)
	}
	return fmt.Sprintf("provider: %s (%s)", vendor, model)
}

// checkURL reports a base URL the SDKs could not use, naming the variable
// that holds it and giving an example of one that works.
func checkURL(name, value, example string) error {
	if err := adapter.CheckURL(value); err != nil {
		return fmt.Errorf("fromenv: %s=%q: %v; set it to the server's URL, e.g. %s", name, value, err, example)
	}
	return nil
}
