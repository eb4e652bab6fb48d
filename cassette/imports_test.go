package cassette_test

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

// cassette stands beside fake, below agent: a provider-level wrapper
// compiles none of the layers above provider.
func TestCassetteImportsOnlyProvider(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{"github.com/deputy-go/deputy/provider", "github.com/deputy-go/deputy/internal/run"}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, "github.com/deputy-go/deputy/") && !slices.Contains(allowed, imp) {
			t.Errorf("cassette imports %s; of deputy it may import only %v", imp, allowed)
		}
	}
}
