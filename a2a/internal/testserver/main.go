// Command testserver serves a deputy agent over A2A for the conformance
// tests in a2a/clienttest (its README is the contract). It listens on
// 127.0.0.1, prints the agent's base URL as the first line of its output,
// and serves until SIGTERM or SIGINT.
//
// The agent, "clerk", is a ReAct agent on a scripted model (no network, no
// model configuration) that decides from the message it is sent:
//   - "pay N": it calls its transfer tool, which asks for approval, so
//     the task becomes input-required; approved, it answers
//     "done: moved N"; rejected, "done: " and the rejection;
//   - "wait": it calls its wait tool, which works until the task is
//     cancelled (or, if nobody cancels it, for 30 s);
//   - anything else: it streams "You said: " and the message, a word at a
//     time.
//
// Every model call costs 10 input and 2 output tokens. GET /stats reports
// what the agent did: {"transfers":…,"cancellations":…,"modelCalls":…}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/deputy-go/deputy/a2a"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	c, err := newClerk()
	if err != nil {
		return err
	}
	h, closeServer, err := handler(c, base)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fmt.Println(base)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		closeServer()
		return err
	case <-ctx.Done():
	}
	// The runs in progress are cancelled first, so that no stream keeps
	// the shutdown waiting.
	closeServer()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// handler serves c's agent over A2A at base, and its counts at /stats. The
// function it returns closes the A2A server.
func handler(c *clerk, base string) (http.Handler, func(), error) {
	s, err := a2a.NewPerTask(c.build, a2a.WithName("clerk"), a2a.WithSkills(c.skills...),
		a2a.WithDescription("Pays with approval, waits until cancelled, and repeats what it is told."),
		a2a.WithURL(base))
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]int64{
			"transfers":     c.transfers.Load(),
			"cancellations": c.cancellations.Load(),
			"modelCalls":    c.modelCalls.Load(),
		})
	})
	mux.Handle("/", s)
	return mux, func() { s.Close() }, nil
}
