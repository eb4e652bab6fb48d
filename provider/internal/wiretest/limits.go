package wiretest

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/provider"
)

// Endless is an HTTP handler that answers with Head and then repeats Unit
// until the client goes away or Limit bytes were sent, so that a body far
// larger than any limit is served without being held in memory. It counts
// the requests it saw in Requests.
type Endless struct {
	ContentType, Head, Unit string
	Limit                   int64
	Requests                atomic.Int32
}

func (e *Endless) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	e.Requests.Add(1)
	w.Header().Set("Content-Type", e.ContentType)
	w.WriteHeader(http.StatusOK)
	if _, err := io.WriteString(w, e.Head); err != nil {
		return
	}
	if e.Unit == "" {
		return
	}
	unit := []byte(strings.Repeat(e.Unit, 1+4096/len(e.Unit)))
	for sent := int64(0); sent < e.Limit; sent += int64(len(unit)) {
		if _, err := w.Write(unit); err != nil {
			return // the client stopped reading
		}
	}
}

// TooLarge checks that err is a KindResponseTooLarge error that names the
// option to change and the limit, and that it does not invite a retry.
func TooLarge(t *testing.T, err error, option, limit string) {
	t.Helper()
	var perr *provider.Error
	if !errors.As(err, &perr) {
		t.Fatalf("error %v (%T) is not a *provider.Error", err, err)
	}
	if perr.Kind != provider.KindResponseTooLarge || perr.Retryable() {
		t.Errorf("kind %q (retryable %v); want %q, not retryable: %v", perr.Kind, perr.Retryable(), provider.KindResponseTooLarge, err)
	}
	if msg := err.Error(); !strings.Contains(msg, option) || !strings.Contains(msg, limit) {
		t.Errorf("error %q does not name %s and %s", msg, option, limit)
	}
}
