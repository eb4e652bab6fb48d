//go:build !realmodel

package pick

import (
	"fmt"

	"github.com/deputy-go/deputy/provider"
)

// vendor keeps the fake in a build without the vendor SDKs, and says how to
// get the provider the environment asks for.
func vendor(kind string, getenv func(string) string, fallback provider.Provider) (provider.Provider, string, error) {
	return fallback, fmt.Sprintf("provider: fake (scripted replies; %s is set, but %s needs a build with the %s tag: go run -tags %s ./examples/...)",
		asked(kind, getenv), kind, BuildTag, BuildTag), nil
}

// asked names the variable by which the environment asked for kind.
func asked(kind string, getenv func(string) string) string {
	if getenv("DEPUTY_PROVIDER") != "" {
		return "DEPUTY_PROVIDER=" + kind
	}
	return "OPENAI_BASE_URL"
}
