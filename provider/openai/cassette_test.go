package openai_test

import (
	"net/http/httptest"
	"testing"

	"github.com/deputy-go/deputy/internal/bigtree"
	"github.com/deputy-go/deputy/provider/providertest"
)

func TestACassetteRecordedOverTheWireReplaysWithoutIt(t *testing.T) {
	clearEnv(t)
	s := providertest.NewScript(t, bigtree.WireReplies()...)
	srv := httptest.NewServer(scriptHandler(t, s))
	defer srv.Close()
	if err := bigtree.WireRoundTrip(newTestProvider(t, srv), srv.Close); err != nil {
		t.Fatal(err)
	}
	if got := len(s.Received()); got != 4 {
		t.Errorf("the server received %d requests, want 4 (all while recording)", got)
	}
}
