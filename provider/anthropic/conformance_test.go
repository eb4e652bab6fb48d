package anthropic_test

import (
	"net/http/httptest"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/providertest"
)

func TestConformance(t *testing.T) {
	clearEnv(t)
	providertest.Run(t, func(t *testing.T, s *providertest.Script) provider.Provider {
		srv := httptest.NewServer(scriptHandler(t, s))
		t.Cleanup(srv.Close)
		p, err := anthropic.New(
			anthropic.WithBaseURL(srv.URL),
			anthropic.WithAPIKey("sk-ant-test"),
			anthropic.WithModel("claude-sonnet-5-5"),
			anthropic.WithMaxRetries(0),
		)
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}
