// Package unreachable tells a failure to reach a server at all (nothing
// listens at its address, its host name does not resolve) from other
// network trouble, for admission control, which tries such a call again
// only briefly, and for the providers' errors, which then say where they
// looked and what to do.
package unreachable

import (
	"errors"
	"net"
	"syscall"
)

// Is reports whether err, or an error in its chain, says the server could
// not be reached: a connection refused, or a host name not found. A DNS
// timeout or a dropped connection is not: a retry may mend those.
func Is(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsNotFound
}
