package sameorigin

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// request is a request that arrived at local, as a server hands it over.
func request(method, host, local string, header ...string) *http.Request {
	r := httptest.NewRequest(method, "/x", strings.NewReader("{}"))
	r.Host = host
	if local != "" {
		a, _ := net.ResolveTCPAddr("tcp", local)
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, a))
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return r
}

func TestCheck(t *testing.T) {
	const json = "application/json"
	strict := &Guard{JSON: true}
	named := &Guard{JSON: true}
	if err := named.AddHost("devbox.local"); err != nil {
		t.Fatal(err)
	}
	if err := named.AddHost("Other.Example:8443"); err != nil {
		t.Fatal(err)
	}
	loopbackOnly := &Guard{Where: OnLoopback}
	trusting := &Guard{Where: OnLoopback}
	if err := trusting.AddOrigin("https://app.example.com"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		g    *Guard
		r    *http.Request
		want int // 0: served
	}{
		{"loopback IP", strict, request("GET", "127.0.0.1:8787", "127.0.0.1:8787"), 0},
		{"localhost", strict, request("GET", "localhost:8787", "127.0.0.1:8787"), 0},
		{"LOCALHOST, no port", strict, request("GET", "LOCALHOST", "127.0.0.1:80"), 0},
		{"a subdomain of localhost", strict, request("GET", "app.localhost:8787", "127.0.0.1:8787"), 0},
		{"IPv6 loopback", strict, request("GET", "[::1]:8787", "[::1]:8787"), 0},
		{"the listener's address", strict, request("GET", "192.168.1.5:8787", "192.168.1.5:8787"), 0},
		{"another address", strict, request("GET", "192.168.1.6:8787", "192.168.1.5:8787"), 421},
		{"a rebound name", strict, request("GET", "rebind.attacker.test:8787", "127.0.0.1:8787"), 421},
		{"a name ending in localhost", strict, request("GET", "evillocalhost:8787", "127.0.0.1:8787"), 421},
		{"localhost as a subdomain", strict, request("GET", "localhost.attacker.test", "127.0.0.1:8787"), 421},
		{"a name given", named, request("GET", "devbox.local:8787", "10.0.0.2:8787"), 0},
		{"a name given with its port", named, request("GET", "other.example:8443", "10.0.0.2:8443"), 0},
		{"a name given, another port", named, request("GET", "other.example:9000", "10.0.0.2:9000"), 421},
		{"rebound, on loopback only", loopbackOnly, request("GET", "rebind.attacker.test:8787", "127.0.0.1:8787"), 421},
		{"a public name on a public address", loopbackOnly, request("GET", "api.example.com", "203.0.113.7:443"), 0},
		{"no listener known", loopbackOnly, request("GET", "api.example.com", ""), 0},
		{"a same-origin post", strict, request("POST", "127.0.0.1:8787", "127.0.0.1:8787", "Content-Type", json, "Origin", "http://127.0.0.1:8787", "Sec-Fetch-Site", "same-origin"), 0},
		{"a non-browser post", strict, request("POST", "127.0.0.1:8787", "127.0.0.1:8787", "Content-Type", json), 0},
		{"a cross-site post", strict, request("POST", "127.0.0.1:8787", "127.0.0.1:8787", "Content-Type", json, "Origin", "http://evil.test", "Sec-Fetch-Site", "cross-site"), 403},
		{"a same-site post of another port", strict, request("POST", "localhost:8787", "127.0.0.1:8787", "Content-Type", json, "Origin", "http://localhost:9999", "Sec-Fetch-Site", "same-site"), 403},
		{"a cross-origin post, no Sec-Fetch-Site", strict, request("POST", "127.0.0.1:8787", "127.0.0.1:8787", "Content-Type", json, "Origin", "http://evil.test"), 403},
		{"an opaque origin", strict, request("POST", "127.0.0.1:8787", "127.0.0.1:8787", "Content-Type", json, "Origin", "null"), 403},
		{"a form's body", strict, request("POST", "127.0.0.1:8787", "127.0.0.1:8787", "Content-Type", "text/plain"), 415},
		{"no Content-Type", strict, request("POST", "127.0.0.1:8787", "127.0.0.1:8787"), 415},
		{"JSON with a charset", strict, request("POST", "127.0.0.1:8787", "127.0.0.1:8787", "Content-Type", "Application/JSON; charset=utf-8"), 0},
		{"a delete from another site", strict, request("DELETE", "127.0.0.1:8787", "127.0.0.1:8787", "Content-Type", json, "Sec-Fetch-Site", "cross-site"), 403},
		{"no Content-Type, not required", loopbackOnly, request("POST", "127.0.0.1:8787", "127.0.0.1:8787"), 0},
		{"a trusted origin", trusting, request("POST", "api.example.com", "203.0.113.7:443", "Origin", "https://app.example.com", "Sec-Fetch-Site", "cross-site"), 0},
		{"an untrusted origin", trusting, request("POST", "api.example.com", "203.0.113.7:443", "Origin", "https://evil.example.com", "Sec-Fetch-Site", "cross-site"), 403},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := 0
			if err := c.g.Check(c.r); err != nil {
				got = err.Status
				if err.Msg == "" {
					t.Error("refused with no message")
				}
			}
			if got != c.want {
				t.Errorf("Check = %d, want %d (0: served)", got, c.want)
			}
		})
	}
}

func TestAddRefusesBadValues(t *testing.T) {
	var g Guard
	for _, h := range []string{"", " ", "http://devbox.local", "a b"} {
		if g.AddHost(h) == nil {
			t.Errorf("AddHost(%q) took it", h)
		}
	}
	for _, o := range []string{"", "app.example.com", "https://app.example.com/", "https://app.example.com/path"} {
		if g.AddOrigin(o) == nil {
			t.Errorf("AddOrigin(%q) took it", o)
		}
	}
}

// BenchmarkCheck is the cost of both checks on a request the page sends:
// a same-origin POST of JSON, and a GET, each with a Host given by name.
func BenchmarkCheck(b *testing.B) {
	var g Guard
	g.JSON = true
	if err := g.AddHost("devbox.local"); err != nil {
		b.Fatal(err)
	}
	post := request("POST", "devbox.local:8787", "127.0.0.1:8787", "Content-Type", "application/json", "Origin", "http://devbox.local:8787", "Sec-Fetch-Site", "same-origin")
	get := request("GET", "localhost:8787", "127.0.0.1:8787")
	b.Run("post", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if g.Check(post) != nil {
				b.Fatal("refused")
			}
		}
	})
	b.Run("get", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if g.Check(get) != nil {
				b.Fatal("refused")
			}
		}
	})
	cross := request("POST", "localhost:8787", "127.0.0.1:8787", "Content-Type", "application/json", "Origin", "http://evil.test", "Sec-Fetch-Site", "cross-site")
	b.Run("refused", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if g.Check(cross) == nil {
				b.Fatal("served")
			}
		}
	})
}
