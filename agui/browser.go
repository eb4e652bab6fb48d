package agui

import (
	"errors"
	"net/http"

	"github.com/deputy-go/deputy/internal/sameorigin"
)

// WithOrigins trusts the pages of these origins ("https://app.example.com",
// scheme and host, no path) to start runs and change threads, as the
// handler's own origin may. By default a request a browser sends from a
// page of another origin, which it marks with Origin and Sec-Fetch-Site,
// is refused with 403 when it would change something (any method but GET,
// HEAD and OPTIONS), so that no other site's page (a form, a fetch, a
// beacon) starts a run with the person's cookies or on their machine.
// Clients that are not browsers send neither header and are not
// concerned. A page served from another origin that calls the handler
// through CORS needs this option.
func WithOrigins(origins ...string) Option {
	return func(c *config) error {
		if len(origins) == 0 {
			return errors.New("WithOrigins(): name the origins to trust, or leave the option out")
		}
		for _, o := range origins {
			if err := c.guard.AddOrigin(o); err != nil {
				return errors.New("WithOrigins: " + err.Error())
			}
		}
		return nil
	}
}

// WithHosts names the hosts the handler answers to besides loopback names
// (localhost and its subdomains, loopback addresses) and the address a
// request arrived at: a name ("devbox.local", any port) or a name and a
// port ("devbox.local:8080"). With it a request naming any other Host is
// refused with 421 Misdirected Request, whatever address it arrived at.
//
// Without it (nor WithAnyHost) the Host is checked only on requests that
// arrived at a loopback address: a server that only its machine reaches,
// where a page of another site that rebinds its own name to 127.0.0.1 (DNS
// rebinding) would otherwise read threads and start runs as a page of the
// server's origin. A server that answers on a public address is not
// concerned; one behind a proxy on its own machine that passes the
// client's Host (proxy_set_header Host $host) names that host here, or
// turns the check off with WithAnyHost.
func WithHosts(hosts ...string) Option {
	return func(c *config) error {
		if len(hosts) == 0 {
			return errors.New("WithHosts(): name the hosts to answer to, or leave the option out")
		}
		if c.hostsSet && c.guard.Where == sameorigin.AnyHost {
			return errors.New("WithHosts and WithAnyHost: keep one")
		}
		for _, h := range hosts {
			if err := c.guard.AddHost(h); err != nil {
				return errors.New("WithHosts: " + err.Error())
			}
		}
		c.guard.Where, c.hostsSet = sameorigin.Everywhere, true
		return nil
	}
}

// WithAnyHost answers every Host, on every address: the handler is not
// reached by a browser on this machine, or something in front of it checks
// the Host. See WithHosts.
func WithAnyHost() Option {
	return func(c *config) error {
		if c.hostsSet && c.guard.Where != sameorigin.AnyHost {
			return errors.New("WithHosts and WithAnyHost: keep one")
		}
		c.guard.Where, c.hostsSet = sameorigin.AnyHost, true
		return nil
	}
}

// admit answers a request the handler does not serve to a browser, before
// anything else of it is read, and reports whether to go on.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request) bool {
	if err := h.cfg.guard.Check(r); err != nil {
		httpError(w, err.Status, "agui: "+err.Msg)
		return false
	}
	return true
}
