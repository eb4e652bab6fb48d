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
			want := []string{"delegating to refunds", "the expert asks: Refunds cost money: Allow issue_refund", "→ refunds started"}
			var wantRefunds int64
			if answer == "yes" {
				want = append(want, "answer: The customer is sorted. Done: refunded $30 on order A-1042.")
				wantRefunds = 1
			} else {
				want = append(want, "answer: The customer is sorted. ", "did not approve")
			}
			for _, w := range want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("the lead's output lacks %q:\n%s", w, out.String())
				}
			}
			if got := refunds.Load(); got != wantRefunds {
				t.Errorf("%d refunds after %q, want %d", got, answer, wantRefunds)
			}
		})
	}
}
