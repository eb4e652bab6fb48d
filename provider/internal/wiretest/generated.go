package wiretest

import (
	"io"
	"net/http"
	"strings"
)

// Generated is a transport that answers every request with an event
// stream of Head, then Unit N times, then Tail, produced as it is read, so
// that a body of any size costs no memory and no network.
type Generated struct {
	Head, Unit, Tail string
	N                int
}

// RoundTrip answers req with a fresh body.
func (g Generated) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	body := io.MultiReader(strings.NewReader(g.Head), &repeated{unit: g.Unit, n: g.N}, strings.NewReader(g.Tail))
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": {"text/event-stream"}},
		Body:       io.NopCloser(body),
		Request:    req,
	}, nil
}

// repeated reads unit n times.
type repeated struct {
	unit   string
	n, off int // repeats left, offset into the current one
}

func (r *repeated) Read(p []byte) (int, error) {
	total := 0
	for len(p) > 0 && r.n > 0 {
		c := copy(p, r.unit[r.off:])
		p, r.off, total = p[c:], r.off+c, total+c
		if r.off == len(r.unit) {
			r.off, r.n = 0, r.n-1
		}
	}
	if total == 0 && r.n == 0 {
		return 0, io.EOF
	}
	return total, nil
}
