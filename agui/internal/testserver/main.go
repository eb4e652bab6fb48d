// Command testserver serves deputy's AG-UI handler over scripted agents, for
// the AG-UI client conformance harness in agui/clienttest (its README is the
// contract). It listens on 127.0.0.1, prints the endpoint URL as the first
// line of its output, and serves until SIGTERM or SIGINT.
//
// Each request runs a real deputy tree on the fake provider: a lead ReAct
// agent that delegates two topics, in parallel, to a FromFactory sub-agent
// tool whose children are ReAct agents with a search tool. The request's
// forwardedProps.scenario picks the story: "two-children" (the default),
// "child-error" (one child's model fails), "slow" (the children pause
// 250 ms before each piece of their replies), "stopped" (the slow run,
// which the server stops with Handler.Stop after 600 ms) or "conversation"
// (the lead's answer lists the messages its model received, for checking a
// conversation over several turns).
//
// At /agui-approval it serves, on threads kept in the SQLite file named by
// AGUI_STORE (a temporary file when unset), a lead whose grandchild's
// "delete" tool asks for approval: the run ends with an interrupt and the
// next request on the thread resumes it (agui/internal/approvaltree). A
// second server started on the same file resumes what the first suspended.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
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
	// The "stopped" scenario stops its own run through the handler.
	var h *agui.Handler
	h, err = agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return build(ctx, in, h.Stop)
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/agui", h)
	approval, closeStore, err := approvalHandler()
	if err != nil {
		return err
	}
	defer closeStore()
	mux.Handle("/agui-approval", approval)
	mux.Handle("/agui-owned", approval)
	mux.Handle("/agui-owned/", approval)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fmt.Printf("http://%s/agui\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
