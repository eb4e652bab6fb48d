package openai_test

import (
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/openai"
)

// The provider names itself for telemetry (gen_ai.provider.name).
func TestProviderName(t *testing.T) {
	var p provider.Provider = new(openai.Provider)
	n, ok := p.(provider.Namer)
	if !ok || n.Name() != "openai" {
		t.Errorf("the openai provider names itself %v (a Namer: %v), want %q", n, ok, "openai")
	}
}
