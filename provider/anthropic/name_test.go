package anthropic_test

import (
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
)

// The provider names itself for telemetry (gen_ai.provider.name).
func TestProviderName(t *testing.T) {
	var p provider.Provider = new(anthropic.Provider)
	n, ok := p.(provider.Namer)
	if !ok || n.Name() != "anthropic" {
		t.Errorf("the anthropic provider names itself %v (a Namer: %v), want %q", n, ok, "anthropic")
	}
}
