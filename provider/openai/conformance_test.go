package openai_test

import (
	"net/http/httptest"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/openai"
	"github.com/deputy-go/deputy/provider/providertest"
)

func TestConformance(t *testing.T) {
	clearEnv(t)
	providertest.Run(t, func(t *testing.T, s *providertest.Script) provider.Provider {
		srv := httptest.NewServer(scriptHandler(t, s))
		t.Cleanup(srv.Close)
		p, err := openai.New(
			openai.WithBaseURL(srv.URL),
			openai.WithAPIKey("sk-test"),
			openai.WithModel("gpt-5.4-mini"),
			openai.WithMaxRetries(0),
		)
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}
