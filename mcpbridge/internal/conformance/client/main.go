// Command client is deputy's MCP client (mcpbridge.Connect) as the
// official MCP conformance suite drives one (mcpbridge/conformance/README.md):
// the suite starts it with a server URL as its argument and the scenario's
// name in MCP_CONFORMANCE_SCENARIO, and the scenario's credentials, if
// any, as JSON in MCP_CONFORMANCE_CONTEXT. It connects as a program using
// deputy would, calls the scenario's tool through the tool.Tool deputy
// made of it, and exits 1 on any failure.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/auth/extauth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/tool"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: client <server-url> (with MCP_CONFORMANCE_SCENARIO set)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	if err := run(ctx, os.Args[1], os.Getenv("MCP_CONFORMANCE_SCENARIO")); err != nil {
		log.Fatal(err)
	}
}

// scenarioContext is what MCP_CONFORMANCE_CONTEXT may hold.
type scenarioContext struct {
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
}

func run(ctx context.Context, serverURL, scenario string) error {
	var sc scenarioContext
	if raw := os.Getenv("MCP_CONFORMANCE_CONTEXT"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &sc); err != nil {
			return fmt.Errorf("MCP_CONFORMANCE_CONTEXT: %v", err)
		}
	}
	var opts []mcpbridge.Option
	call, args := "", "{}"
	switch {
	case scenario == "initialize":
	case scenario == "tools_call":
		call, args = "add_numbers", `{"a":5,"b":3}`
	case scenario == "sse-retry":
		call = "test_reconnection"
	case scenario == "auth/client-credentials-basic":
		h, err := extauth.NewClientCredentialsHandler(&extauth.ClientCredentialsHandlerConfig{
			Credentials: &oauthex.ClientCredentials{ClientID: sc.ClientID, ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: sc.ClientSecret}},
		})
		if err != nil {
			return err
		}
		opts = append(opts, mcpbridge.WithOAuth(h))
		call = "test-tool"
	case strings.HasPrefix(scenario, "auth/"):
		cfg := &auth.AuthorizationCodeHandlerConfig{
			RedirectURL:                    "http://localhost:3000/callback",
			AuthorizationCodeFetcher:       browser,
			ClientIDMetadataDocumentConfig: &auth.ClientIDMetadataDocumentConfig{URL: "https://conformance-test.local/client-metadata.json"},
			DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{
				Metadata: &oauthex.ClientRegistrationMetadata{RedirectURIs: []string{"http://localhost:3000/callback"}},
			},
		}
		if sc.ClientID != "" {
			cfg.PreregisteredClient = &oauthex.ClientCredentials{ClientID: sc.ClientID, ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: sc.ClientSecret}}
		}
		h, err := auth.NewAuthorizationCodeHandler(cfg)
		if err != nil {
			return err
		}
		opts = append(opts, mcpbridge.WithOAuth(h))
		call = "test-tool"
	default:
		return fmt.Errorf("scenario %q: deputy's client does not claim it (mcpbridge/conformance/README.md)", scenario)
	}
	c, err := mcpbridge.Connect(ctx, mcpbridge.HTTP(serverURL), opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	if call == "" {
		return nil
	}
	reg, err := tool.NewRegistry()
	if err != nil {
		return err
	}
	if err := c.Register(reg); err != nil {
		return err
	}
	res, err := reg.Execute(ctx, []tool.Call{{ID: "call_1", Name: call, Arguments: json.RawMessage(args)}})
	if err != nil {
		return err
	}
	if res[0].IsError {
		// The cause, which the model is not shown, is the Go error's.
		return fmt.Errorf("%s: %s (%v)", call, res[0].Content, res[0].Err)
	}
	log.Printf("%s answered: %s", call, res[0].Content)
	return nil
}

// browser plays the person at the browser: the suite's authorization
// server answers the authorization URL with a redirect that carries the
// code at once.
func browser(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, args.URL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Query().Get("code") == "" {
		return nil, errors.New("the authorization server did not redirect with a code: " + resp.Status)
	}
	q := loc.Query()
	return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
}
