package mcpbridge_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/tool"
)

// farFuture is when the tokens of these tests expire.
var farFuture = time.Now().Add(24 * time.Hour)

// guarded serves thirdPartyServer over streamable HTTP behind the MCP
// SDK's bearer-token check, which accepts the tokens ok accepts.
func guarded(t *testing.T, ok func(token string, r *http.Request) bool, opts *auth.RequireBearerTokenOptions) *httptest.Server {
	t.Helper()
	verify := func(_ context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
		if !ok(token, r) {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Expiration: farFuture}, nil
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return thirdPartyServer() }, nil)
	hs := httptest.NewServer(auth.RequireBearerToken(verify, opts)(h))
	t.Cleanup(hs.Close)
	return hs
}

func TestA401SaysHowToAuthorize(t *testing.T) {
	hs := guarded(t, func(string, *http.Request) bool { return false },
		&auth.RequireBearerTokenOptions{ResourceMetadataURL: "http://127.0.0.1:1/.well-known/oauth-protected-resource"})
	_, err := mcpbridge.Connect(context.Background(), mcpbridge.HTTP(hs.URL))
	if err == nil {
		t.Fatal("connected to a server that refuses every request")
	}
	msg := err.Error()
	for _, want := range []string{hs.URL, "401", "WithHeader", "WithOAuth", "resource_metadata"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if strings.Contains(msg, "check that it is an MCP server") {
		t.Errorf("the error blames the server for asking for credentials: %v", err)
	}
}

func TestARefusedTokenAndA403SayWhatToDo(t *testing.T) {
	hs := guarded(t, func(string, *http.Request) bool { return false }, nil)
	_, err := mcpbridge.Connect(context.Background(), mcpbridge.HTTP(hs.URL), mcpbridge.WithHeader("Authorization", "Bearer old"))
	if err == nil || !strings.Contains(err.Error(), "refused the Authorization header") || !strings.Contains(err.Error(), hs.URL) {
		t.Errorf("a refused token: %v, want an error saying the token was refused", err)
	}
	forbidden := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusForbidden)
	}))
	defer forbidden.Close()
	_, err = mcpbridge.Connect(context.Background(), mcpbridge.HTTP(forbidden.URL))
	if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "ask the server's operator") {
		t.Errorf("a 403: %v, want an error saying to ask for access", err)
	}
}

func TestHeadersReachTheServer(t *testing.T) {
	hs := guarded(t, func(token string, r *http.Request) bool {
		return token == "s3cret" && r.Header.Get("X-Tenant") == "acme"
	}, nil)
	c, err := mcpbridge.Connect(context.Background(), mcpbridge.HTTP(hs.URL),
		mcpbridge.WithHeader("Authorization", "Bearer s3cret"), mcpbridge.WithHeader("x-tenant", "acme"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	if r := call(t, reg, "echo", `{"text":"in"}`); r.Content != "echo: in" {
		t.Errorf("a call with the headers: %+v", r)
	}
}

// countingTransport counts the requests a caller's client sends.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

func TestACallersHTTPClientIsUsedAndRepliesStayBounded(t *testing.T) {
	hs := hugeReplyHTTP(20_000_000)
	defer hs.Close()
	rt := &countingTransport{}
	hc := &http.Client{Transport: rt}
	c, err := mcpbridge.Connect(context.Background(), mcpbridge.HTTP(hs.URL), mcpbridge.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if rt.n.Load() == 0 {
		t.Error("the caller's client sent nothing")
	}
	if hc.Transport != rt {
		t.Error("the caller's client was changed")
	}
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	if r := call(t, reg, "echo", `{"text":"x"}`); !r.IsError || !strings.Contains(r.Content, "larger than") {
		t.Errorf("a 20 MB reply through the caller's client: %.200s, want an error result", r.Content)
	}
}

func TestHTTPOptionsAreRefusedWhereTheyDoNotApply(t *testing.T) {
	for name, opts := range map[string][]mcpbridge.Option{
		"a header for a command":       {mcpbridge.WithHeader("X-Key", "k")},
		"an HTTP client for a command": {mcpbridge.WithHTTPClient(http.DefaultClient)},
	} {
		if _, err := mcpbridge.Connect(context.Background(), mcpbridge.Command("true"), opts...); err == nil || !strings.Contains(err.Error(), "only apply to an HTTP server") {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		RedirectURL:         "http://127.0.0.1/cb",
		PreregisteredClient: &oauthex.ClientCredentials{ClientID: "x"},
		AuthorizationCodeFetcher: func(context.Context, *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			return nil, errors.New("no")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]mcpbridge.Option{
		"an OAuth handler for a command": {mcpbridge.WithOAuth(h)},
	} {
		if _, err := mcpbridge.Connect(context.Background(), mcpbridge.Command("true"), opts...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for name, o := range map[string]mcpbridge.Option{
		"a header name with a space": mcpbridge.WithHeader("X Key", "k"),
		"a value with a line break":  mcpbridge.WithHeader("X-Key", "k\r\nX-Evil: 1"),
		"a header of the transport":  mcpbridge.WithHeader("mcp-session-id", "s"),
		"a nil client":               mcpbridge.WithHTTPClient(nil),
		"a nil handler":              mcpbridge.WithOAuth(nil),
	} {
		if _, err := mcpbridge.Connect(context.Background(), mcpbridge.HTTP("http://127.0.0.1:1/mcp"), o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	_, err = mcpbridge.Connect(context.Background(), mcpbridge.HTTP("http://127.0.0.1:1/mcp"),
		mcpbridge.WithHeader("Authorization", "Bearer t"), mcpbridge.WithOAuth(h))
	if err == nil || !strings.Contains(err.Error(), "pass one of them") {
		t.Errorf("a token and an OAuth handler: %v, want a refusal", err)
	}
}

// authServer is an OAuth 2.1 authorization server for tests: metadata
// discovery, dynamic client registration, the authorization code flow
// with PKCE (S256 only), tokens bound to one resource.
type authServer struct {
	*httptest.Server
	resource string

	mu         sync.Mutex
	clients    map[string]bool
	codes      map[string]string // code: its S256 challenge
	tokens     map[string]bool
	registered int
	issued     int
}

func newAuthServer(t *testing.T, resource string) *authServer {
	t.Helper()
	as := &authServer{resource: resource, clients: map[string]bool{}, codes: map[string]string{}, tokens: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{
			"issuer":                                as.URL,
			"authorization_endpoint":                as.URL + "/authorize",
			"token_endpoint":                        as.URL + "/token",
			"registration_endpoint":                 as.URL + "/register",
			"response_types_supported":              []string{"code"},
			"grant_types_supported":                 []string{"authorization_code"},
			"code_challenge_methods_supported":      []string{"S256"},
			"token_endpoint_auth_methods_supported": []string{"none"},
		})
	})
	mux.HandleFunc("POST /register", func(w http.ResponseWriter, r *http.Request) {
		as.mu.Lock()
		as.registered++
		id := fmt.Sprintf("client-%d", as.registered)
		as.clients[id] = true
		as.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		writeJSON(w, map[string]any{"client_id": id, "token_endpoint_auth_method": "none", "redirect_uris": []string{"http://127.0.0.1/callback"}})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		as.mu.Lock()
		known := as.clients[q.Get("client_id")]
		as.mu.Unlock()
		if !known || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("resource") != as.resource {
			http.Error(w, "bad authorization request: "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		code := fmt.Sprintf("code-%d", len(as.codes)+1)
		as.mu.Lock()
		as.codes[code] = q.Get("code_challenge")
		as.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?code="+code+"&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		as.mu.Lock()
		defer as.mu.Unlock()
		challenge, ok := as.codes[r.PostForm.Get("code")]
		delete(as.codes, r.PostForm.Get("code"))
		if !ok || challenge != base64.RawURLEncoding.EncodeToString(sum[:]) || r.PostForm.Get("resource") != as.resource {
			w.WriteHeader(http.StatusBadRequest)
			writeJSON(w, map[string]any{"error": "invalid_grant"})
			return
		}
		as.issued++
		tok := fmt.Sprintf("token-%d", as.issued)
		as.tokens[tok] = true
		writeJSON(w, map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3600})
	})
	as.Server = httptest.NewServer(mux)
	t.Cleanup(as.Close)
	return as
}

func (as *authServer) valid(token string) bool {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.tokens[token]
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// followRedirect plays the person in the browser: it opens the
// authorization URL and reads the code from where the server sends them.
func followRedirect(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
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
	if err != nil || resp.StatusCode != http.StatusFound {
		return nil, fmt.Errorf("the authorization server answered %s", resp.Status)
	}
	return &auth.AuthorizationResult{Code: loc.Query().Get("code"), State: loc.Query().Get("state")}, nil
}

// oauthProtected is an MCP server protected as MCP's authorization
// specification says: a 401 naming its protected resource metadata,
// which names as.
func oauthProtected(t *testing.T) (mcpURL string, as *authServer) {
	t.Helper()
	mux := http.NewServeMux()
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	mcpURL = hs.URL + "/mcp"
	as = newAuthServer(t, mcpURL)
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: mcpURL, AuthorizationServers: []string{as.URL},
	}))
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if !as.valid(token) {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Expiration: farFuture}, nil
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return thirdPartyServer() }, nil)
	mux.Handle("/mcp", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: hs.URL + "/.well-known/oauth-protected-resource/mcp",
	})(h))
	return mcpURL, as
}

func TestOAuthDiscoversRegistersAndAuthorizesWithPKCE(t *testing.T) {
	mcpURL, as := oauthProtected(t)
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		RedirectURL:              "http://127.0.0.1/callback",
		AuthorizationCodeFetcher: followRedirect,
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{
			Metadata: &oauthex.ClientRegistrationMetadata{RedirectURIs: []string{"http://127.0.0.1/callback"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := mcpbridge.Connect(context.Background(), mcpbridge.HTTP(mcpURL), mcpbridge.WithOAuth(h))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	if r := call(t, reg, "echo", `{"text":"authorized"}`); r.Content != "echo: authorized" {
		t.Errorf("a call after authorizing: %+v", r)
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.registered != 1 || as.issued != 1 {
		t.Errorf("%d registrations and %d tokens, want one of each", as.registered, as.issued)
	}
}

func TestOAuthThatFailsSaysSo(t *testing.T) {
	mcpURL, _ := oauthProtected(t)
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		RedirectURL: "http://127.0.0.1/callback",
		AuthorizationCodeFetcher: func(context.Context, *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			return nil, errors.New("the person closed the browser")
		},
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{
			Metadata: &oauthex.ClientRegistrationMetadata{RedirectURIs: []string{"http://127.0.0.1/callback"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = mcpbridge.Connect(context.Background(), mcpbridge.HTTP(mcpURL), mcpbridge.WithOAuth(h))
	if err == nil || !strings.Contains(err.Error(), mcpURL) || !strings.Contains(err.Error(), "the person closed the browser") {
		t.Errorf("a failed authorization: %v, want an error naming the server and the cause", err)
	}
}
