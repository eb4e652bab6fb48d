package main

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The pair as the doc runs it, the person answering "yes": the refund
// is made once, on the expert's side, and the lead reports it.
func TestPair(t *testing.T) {
	for _, answer := range []string{"yes", "no"} {
		t.Run(answer, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var refunds atomic.Int64
			var served strings.Builder
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := serve(ctx, ln, &served, &refunds); err != nil {
					t.Error(err)
				}
			}()
			defer func() { cancel(); wg.Wait() }()

			var out strings.Builder
			if err := run(ctx, []string{"lead", "-url", "http://" + ln.Addr().String()}, strings.NewReader(answer+"\n"), &out); err != nil {
				t.Fatalf("lead: %v\n%s", err, out.String())
			}
			// Every line, the figures too: two model calls on each side
			// (the lead's first answer and the expert's question are
			// replayed on resume, not asked again), at 30 in and 10 out
			// for the lead's, 40 in and 12 out for the expert's.
			outcome, wantRefunds := "Done: refunded $30 on order A-1042.", int64(1)
			if answer == "no" {
				outcome, wantRefunds = "Done: tool: the person asked did not approve the call issue_refund.", 0
			}
			addr := ln.Addr().String()
			want := "delegating to refunds (http://" + addr + ")\n" +
				"  → refunds started\n" +
				"  ← refunds waits for an answer\n" +
				`the expert asks: Refunds cost money: Allow issue_refund with {"order":"A-1042","amount":30}? [yes/no] ` + "\n" +
				"  → refunds started\n" +
				"  ← refunds answered\n" +
				"answer: The customer is sorted. " + outcome + "\n" +
				"usage, both sides: 4 req, 140 in, 44 out\n"
			if got := out.String(); got != want {
				t.Errorf("the lead printed:\n%s\nwant:\n%s", got, want)
			}
			if got, want := served.String(), "serving the refunds expert at http://"+addr+"\n"; got != want {
				t.Errorf("the server printed %q, want %q", got, want)
			}
			if got := refunds.Load(); got != wantRefunds {
				t.Errorf("%d refunds after %q, want %d", got, answer, wantRefunds)
			}
		})
	}
}
