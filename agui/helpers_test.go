package agui_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/event"
)

// frame is one SSE frame of a response: its data line as sent, and the
// event it decodes to.
type frame struct {
	raw string
	e   event.Event
}

// post sends body to url with headers and returns the response.
func post(t *testing.T, url, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// readFrames reads a whole event stream, checking the framing the AG-UI
// client relies on: "data: <one-line JSON>\n\n", LF only.
func readFrames(t *testing.T, r io.Reader) []frame {
	t.Helper()
	body, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(body, []byte("\r")) {
		t.Fatal("the stream contains a CR")
	}
	var out []frame
	chunks := strings.Split(string(body), "\n\n")
	if last := chunks[len(chunks)-1]; last != "" {
		t.Fatalf("the stream ends inside a frame: %q", last)
	}
	for _, c := range chunks[:len(chunks)-1] {
		data, ok := strings.CutPrefix(c, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("not a one-line data frame: %q", c)
		}
		var e event.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatalf("frame %q: %v", data, err)
		}
		out = append(out, frame{raw: data, e: e})
	}
	return out
}

func events(frames []frame) []event.Event {
	out := make([]event.Event, len(frames))
	for i, f := range frames {
		out[i] = f.e
	}
	return out
}

// scan reads frames one at a time, for tests that stop reading early.
func scanFrames(r io.Reader) func() (event.Event, bool) {
	sc := bufio.NewScanner(r)
	return func() (event.Event, bool) {
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var e event.Event
			if json.Unmarshal([]byte(data), &e) == nil {
				return e, true
			}
		}
		return event.Event{}, false
	}
}

func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
