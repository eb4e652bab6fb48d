// Command devserver runs a Temporal development server in one process, with
// an in-memory SQLite store, its frontend listening on 127.0.0.1. It is for
// tests and examples and keeps nothing after it exits.
//
// It writes "host:port namespace" as one line to the file named by -ready
// (and to stdout) once the server accepts clients, then runs until it gets
// SIGINT or SIGTERM.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.temporal.io/server/temporaltest"
)

func main() {
	ready := flag.String("ready", "", "file to write \"host:port namespace\" to once the server is up")
	flag.Parse()

	srv := temporaltest.NewServer()
	line := fmt.Sprintf("%s %s\n", srv.GetFrontendHostPort(), srv.GetDefaultNamespace())
	if *ready != "" {
		tmp := *ready + ".tmp"
		if err := os.WriteFile(tmp, []byte(line), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "devserver: write %s: %v\n", tmp, err)
			os.Exit(1)
		}
		if err := os.Rename(tmp, *ready); err != nil {
			fmt.Fprintf(os.Stderr, "devserver: %v\n", err)
			os.Exit(1)
		}
	}
	fmt.Print(line)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	// The store is in memory: nothing to flush. Exit without the slow
	// graceful shutdown of every service.
	os.Exit(0)
}
