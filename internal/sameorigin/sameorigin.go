// Package sameorigin keeps a handler served to a browser to its own page:
// it refuses a request whose Host the handler was not told it serves (a
// page that rebinds its own name to the server's address), and a
// state-changing request another site's page sent (cross-site request
// forgery). Requests of non-browser clients, which send neither Origin nor
// Sec-Fetch-Site, pass the origin check; the Host check holds for them too.
package sameorigin

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Hosts says where the Host check holds.
type Hosts int

const (
	// Everywhere checks the Host of every request.
	Everywhere Hosts = iota
	// OnLoopback checks the Host of the requests that arrived at a
	// loopback address: a server only this machine reaches, which a page
	// the browser loaded from elsewhere reaches by rebinding its name.
	OnLoopback
	// AnyHost checks no Host.
	AnyHost
)

// Guard decides whether a request may reach the handler. The zero value
// checks every Host, admits only loopback names and the listener's
// address, and trusts no other origin. Configure it before serving; it is
// then safe for concurrent use.
type Guard struct {
	// Where is where the Host check holds.
	Where Hosts
	// JSON requires a state-changing request (any method but GET, HEAD
	// and OPTIONS) to be sent as application/json, which no form and no
	// request without a preflight can be.
	JSON bool
	// HostsOption and OriginsOption name the options that admit another
	// host and trust another origin, for the refusals to say ("" for
	// none).
	HostsOption, OriginsOption string

	hosts   map[string]bool // lower case, as given: "name" (any port) or "name:port"
	origins http.CrossOriginProtection
}

// Error is a refused request: the status to answer it with, and why.
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// AddHost admits a Host besides loopback names and the listener's
// address: a name, which any port, or "name:port", which that port only.
func (g *Guard) AddHost(host string) error {
	h := strings.ToLower(strings.TrimSpace(host))
	if h == "" || strings.ContainsAny(h, "/ ") {
		return fmt.Errorf("host %q: give a name as a browser's address bar has it, such as devbox.local or devbox.local:8080", host)
	}
	if g.hosts == nil {
		g.hosts = map[string]bool{}
	}
	g.hosts[h] = true
	return nil
}

// AddOrigin trusts the pages of origin ("scheme://host[:port]") to send
// state-changing requests.
func (g *Guard) AddOrigin(origin string) error {
	if strings.HasSuffix(origin, "/") {
		return fmt.Errorf("origin %q: leave the path out, as in https://app.example.com", origin)
	}
	return g.origins.AddTrustedOrigin(origin)
}

// Check returns nil for a request the handler may serve, and why not for
// any other.
func (g *Guard) Check(r *http.Request) *Error {
	if g.Where != AnyHost && !g.hostServed(r) {
		return &Error{http.StatusMisdirectedRequest, fmt.Sprintf("Host %q is not a name this server answers to (loopback names, its own address and the hosts it was given): open it at localhost or at its address, or name the host with %s", r.Host, g.HostsOption)}
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	if err := g.origins.Check(r); err != nil {
		msg := "a request from a page of another site (Origin " + quote(r.Header.Get("Origin")) + ", Sec-Fetch-Site " + quote(r.Header.Get("Sec-Fetch-Site")) + "): only this server's own page may send it"
		if g.OriginsOption != "" {
			msg += ", or a page whose origin is trusted with " + g.OriginsOption
		}
		return &Error{http.StatusForbidden, msg}
	}
	if g.JSON && !isJSON(r.Header["Content-Type"]) {
		return &Error{http.StatusUnsupportedMediaType, "Content-Type " + quote(r.Header.Get("Content-Type")) + ": send the body as application/json"}
	}
	return nil
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

// isJSON reports whether a Content-Type header is application/json, with
// or without parameters.
func isJSON(ct []string) bool {
	if len(ct) != 1 {
		return false
	}
	mt, _, _ := strings.Cut(ct[0], ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}

// hostServed reports whether the request's Host is one the server
// answers to.
func (g *Guard) hostServed(r *http.Request) bool {
	if g.Where == OnLoopback && !localAddr(r).IsLoopback() {
		return true
	}
	if r.Host == "" {
		return true // HTTP/1.0: no browser sends it
	}
	name, port := splitHost(r.Host)
	if isLoopbackName(name) {
		return true
	}
	if len(g.hosts) > 0 {
		lower := strings.ToLower(name)
		if g.hosts[lower] || (port != "" && g.hosts[lower+":"+port]) {
			return true
		}
	}
	if name == "" || !(name[0] >= '0' && name[0] <= '9' || strings.Contains(name, ":")) {
		return false // not an IP address
	}
	ip, err := netip.ParseAddr(name)
	ip = ip.Unmap()
	return err == nil && (ip.IsLoopback() || ip == localAddr(r))
}

// localAddr is the address the request arrived at, if the server said.
func localAddr(r *http.Request) netip.Addr {
	switch a := r.Context().Value(http.LocalAddrContextKey).(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	case net.Addr:
		ap, _ := netip.ParseAddrPort(a.String())
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// splitHost splits a Host header into its name, without the brackets of
// an IPv6 literal, and its port ("" when it has none).
func splitHost(host string) (name, port string) {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") && (host[0] == '[' || strings.Count(host, ":") == 1) {
		name, port = host[:i], host[i+1:]
	} else {
		name = host
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	return strings.TrimSuffix(name, "."), port
}

// isLoopbackName reports whether a name is localhost or one of its
// subdomains, which browsers resolve to loopback themselves.
func isLoopbackName(name string) bool {
	const lh = "localhost"
	n := len(name)
	return (n == len(lh) && strings.EqualFold(name, lh)) ||
		(n > len(lh) && name[n-len(lh)-1] == '.' && strings.EqualFold(name[n-len(lh):], lh))
}
