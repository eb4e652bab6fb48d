// Package pick chooses the model provider that deputy's examples run on.
//
// The examples run on a scripted fake. The vendor SDKs are linked only when
// the examples are built with the realmodel tag, so that the tour builds
// quickly on first contact. With the tag, the environment chooses, through
// provider/fromenv (a program of one's own imports that package; this one is
// internal to the examples):
//
//	DEPUTY_PROVIDER=openai     with OPENAI_API_KEY (OPENAI_MODEL optional)
//	DEPUTY_PROVIDER=anthropic  with ANTHROPIC_API_KEY (ANTHROPIC_MODEL optional),
//	                           or ANTHROPIC_BASE_URL for a local server (no key)
//	OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_MODEL=qwen3
//	                           a local OpenAI-compatible server such as Ollama;
//	                           no key needed, DEPUTY_PROVIDER may stay unset
//
// for example:
//
//	OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_MODEL=qwen3 go run -tags realmodel ./examples/quickstart
//
// DEPUTY_PROVIDER=fake keeps the fake even when OPENAI_BASE_URL is set.
// Without the tag, an environment that asks for a real model gets the fake,
// and the description says how to build with the tag. Each example prints
// the description as its first line, so that its output says which model
// produced it.
package pick

import (
	"fmt"
	"os"
	"strings"

	"github.com/deputy-go/deputy/provider"
)

// BuildTag is the build tag that links the real providers into the examples.
const BuildTag = "realmodel"

// FakeDescription describes the fallback provider when the environment asks
// for no real model.
const FakeDescription = `provider: fake (scripted replies; docs/providers.md tells how to use a real one)`

// Provider returns the provider chosen by the process environment, or
// fallback, with a one-line description such as
// "provider: openai (gpt-5.4-mini)". A program's main calls it; tests call
// FromEnv, so that they never read the real environment.
func Provider(fallback provider.Provider) (provider.Provider, string, error) {
	return FromEnv(os.Getenv, fallback)
}

// FromEnv is Provider with the environment read through getenv. It reports a
// choice that cannot work, saying which variable to set.
func FromEnv(getenv func(string) string, fallback provider.Provider) (provider.Provider, string, error) {
	if fallback == nil {
		return nil, "", fmt.Errorf("pick: no fallback provider; pass the example's fake provider")
	}
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	name := strings.ToLower(strings.TrimSpace(getenv("DEPUTY_PROVIDER")))
	switch {
	case name == "openai", name == "" && getenv("OPENAI_BASE_URL") != "":
		return vendor("openai", getenv, fallback)
	case name == "anthropic":
		return vendor("anthropic", getenv, fallback)
	case name == "" || name == "fake":
		return fallback, FakeDescription, nil
	}
	return nil, "", fmt.Errorf("pick: DEPUTY_PROVIDER=%q is not a provider; use openai, anthropic or fake, or leave it unset", name)
}
