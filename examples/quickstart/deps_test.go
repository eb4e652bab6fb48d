//go:build !realmodel

package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// The tour runs on the scripted model, so a first go run builds no vendor
// SDK: they are linked only with -tags realmodel.
func TestTourLinksNoVendorSDK(t *testing.T) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("no build information in this binary")
	}
	for _, m := range info.Deps {
		if strings.Contains(m.Path, "openai-go") || strings.Contains(m.Path, "anthropic-sdk-go") {
			t.Errorf("the tour links %s; link the vendor SDKs only in files built with the realmodel tag", m.Path)
		}
	}
	t.Logf("%d modules linked", len(info.Deps))
}
