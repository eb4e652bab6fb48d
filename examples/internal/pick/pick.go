// Package pick chooses the model provider that deputy's examples run on.
//
// The examples run on a scripted fake unless the user asks for a real model:
//
//	DEPUTY_PROVIDER=openai     with OPENAI_API_KEY (OPENAI_MODEL optional)
//	DEPUTY_PROVIDER=anthropic  with ANTHROPIC_API_KEY (ANTHROPIC_MODEL optional)
//	OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_MODEL=qwen3
//	                           a local OpenAI-compatible server such as Ollama;
//	                           no key needed, DEPUTY_PROVIDER may stay unset
//
// DEPUTY_PROVIDER=fake keeps the fake even when OPENAI_BASE_URL is set.
// Each example prints the description that Provider returns as its first
// line, so that its output says which model produced it.
package pick

import (
	"fmt"
	"os"
	"strings"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/openai"
)

// FakeDescription describes the fallback provider.
const FakeDescription = "provider: fake (set DEPUTY_PROVIDER=openai|anthropic to use a real model)"

// localKey is sent to a local server that needs no API key; the SDK wants
// one and such servers ignore it.
const localKey = "local"

// Provider returns the provider chosen by the environment, or fallback when
// the environment asks for none, with a one-line description such as
// "provider: openai (gpt-5.4-mini)". It reports a choice that cannot work,
// saying which variable to set.
func Provider(fallback provider.Provider) (provider.Provider, string, error) {
	return FromEnv(os.Getenv, fallback)
}

// FromEnv is Provider with the environment read through getenv.
func FromEnv(getenv func(string) string, fallback provider.Provider) (provider.Provider, string, error) {
	name := strings.ToLower(strings.TrimSpace(getenv("DEPUTY_PROVIDER")))
	switch {
	case name == "openai", name == "" && getenv("OPENAI_BASE_URL") != "":
		return openaiFrom(getenv)
	case name == "anthropic":
		return anthropicFrom(getenv)
	case name == "" || name == "fake":
		if fallback == nil {
			return nil, "", fmt.Errorf("pick: no fallback provider; pass the example's fake provider")
		}
		return fallback, FakeDescription, nil
	}
	return nil, "", fmt.Errorf("pick: DEPUTY_PROVIDER=%q is not a provider; use openai, anthropic or fake, or leave it unset", name)
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
	if baseURL != "" {
		if model == "" {
			return nil, "", fmt.Errorf("pick: OPENAI_BASE_URL=%s needs OPENAI_MODEL, a model that server serves (e.g. OPENAI_MODEL=qwen3 after ollama pull qwen3)", baseURL)
		}
		opts = append(opts, openai.WithBaseURL(baseURL))
	}
	if model != "" {
		opts = append(opts, openai.WithModel(model))
	}
	p, err := openai.New(opts...)
	if err != nil {
		return nil, "", fmt.Errorf("pick: %w", err)
	}
	desc := fmt.Sprintf("provider: openai (%s)", p.Model())
	if baseURL != "" {
		desc = fmt.Sprintf("provider: openai (%s at %s)", p.Model(), p.BaseURL())
	}
	return p, desc, nil
}

func anthropicFrom(getenv func(string) string) (provider.Provider, string, error) {
	key := getenv("ANTHROPIC_API_KEY")
	if key == "" {
		return nil, "", fmt.Errorf("pick: DEPUTY_PROVIDER=anthropic needs ANTHROPIC_API_KEY")
	}
	opts := []anthropic.Option{anthropic.WithAPIKey(key)}
	if u := getenv("ANTHROPIC_BASE_URL"); u != "" {
		opts = append(opts, anthropic.WithBaseURL(u))
	}
	if m := getenv("ANTHROPIC_MODEL"); m != "" {
		opts = append(opts, anthropic.WithModel(m))
	}
	p, err := anthropic.New(opts...)
	if err != nil {
		return nil, "", fmt.Errorf("pick: %w", err)
	}
	return p, fmt.Sprintf("provider: anthropic (%s)", p.Model()), nil
}
