package a2a_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
)

// A remote agent whose card declares a bearer scheme is called with the
// credential given for it (WithCredential), or with a header of the
// application's (WithHeader); without either, the call fails naming the
// remote, and the served agent never runs.
func TestRemoteAuthentication(t *testing.T) {
	var ran atomic.Int64
	expert := agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		ran.Add(1)
		return agent.Output{Answer: "secret answer"}, nil
	})
	srv, err := a2a.NewServer(expert, a2a.WithName("vault"),
		a2a.WithAuthorize(func(r *http.Request) (string, error) {
			if r.Header.Get("Authorization") != "Bearer s3cret" {
				return "", &a2a.Refusal{Status: http.StatusUnauthorized, Message: "bearer token required"}
			}
			return "app", nil
		}),
		a2a.WithCard(func(c *sdk.AgentCard) {
			c.SecuritySchemes = sdk.NamedSecuritySchemes{"token": sdk.HTTPAuthSecurityScheme{Scheme: "Bearer"}}
			c.SecurityRequirements = sdk.SecurityRequirementsOptions{{"token": sdk.SecuritySchemeScopes{}}}
		}),
		a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer srv.Close()
	ctx := context.Background()
	for name, opts := range map[string][]a2a.RemoteOption{
		"credential for the card's scheme": {a2a.WithCredential("token", "s3cret")},
		"header":                           {a2a.WithHeader("Authorization", "Bearer s3cret")},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := a2a.Connect(ctx, hs.URL, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			out, err := r.Run(ctx, agent.Input{Text: "open"})
			if err != nil || out.Answer != "secret answer" {
				t.Fatalf("%q, %v", out.Answer, err)
			}
		})
	}
	before := ran.Load()
	r, err := a2a.Connect(ctx, hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Run(ctx, agent.Input{Text: "open"})
	if !errors.Is(err, a2a.ErrRemote) || !strings.Contains(err.Error(), "vault") {
		t.Errorf("a call without credentials: %v, want an error naming the remote", err)
	}
	if ran.Load() != before {
		t.Error("the served agent ran for a call without credentials")
	}
}
