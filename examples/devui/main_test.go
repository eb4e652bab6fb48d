package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example serves the viewer and the scripted tree: the page loads, and
// a run started through the viewer stops at the editor's question.
func TestServesTheViewer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, "127.0.0.1:0", "", scripted{}, w); w.Close() }()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, r)
	url := strings.TrimSpace(line[strings.Index(line, "http://"):])
	page, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if page.StatusCode != http.StatusOK {
		t.Errorf("the page: %d", page.StatusCode)
	}
	resp, err := http.Post(url+"run", "application/json", strings.NewReader(`{"threadId":"t1","runId":"r1","messages":[{"id":"m1","role":"user","content":"go"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`"name":"researcher"`, `"name":"editor"`, `"name":"fact_checker"`, `"type":"interrupt"`, `"reason":"tool_approval"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the run's events lack %s", want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop")
	}
}
