package fake_test

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

// fake stands below agent: a test of a provider, a tool or an agent can
// script a model without compiling the layers above provider.
func TestFakeImportsOnlyProvider(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{"github.com/deputy-go/deputy/provider", "github.com/deputy-go/deputy/internal/run"}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, "github.com/deputy-go/deputy/") && !slices.Contains(allowed, imp) {
			t.Errorf("fake imports %s; of deputy it may import only %v", imp, allowed)
		}
	}
}
