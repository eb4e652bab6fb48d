//go:build realmodel

package pick

import (
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/fromenv"
)

// vendor builds the provider the environment asks for. FromEnv has already
// decided that it asks for kind, by the same rule fromenv.New follows.
func vendor(_ string, getenv func(string) string, _ provider.Provider) (provider.Provider, string, error) {
	return fromenv.New(getenv)
}
