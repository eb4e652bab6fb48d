package main

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The advisor runs to its answer on the scripted fakes. Every figure it
// prints is checked: each node's model and cost at that model's prices
// (small-1 $0.25/$1.25, large-1 $15/$75 a million tokens in/out): the
// lead 2700 in, 270 out on small-1 is $0.0010125; the default child 600
// in, 40 out on small-1 $0.0002; the consulted expert 700 in, 120 out on
// large-1 $0.0195; together $0.0207125, against $0.09225 for the 4000 in
// and 430 out all on large-1.
func TestAdvisor(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := `provider: fake (scripted replies), made-up prices a million tokens in/out: small-1 $0.25/$1.25, large-1 $15/$75
the lead reads, in the spawn tool's model argument:
  Optional: the model the sub-agent runs on, by what it costs: small ($0.25 input, $1.25 output); large ($15 input, $75 output), in US dollars per million tokens. Leave it out to run the sub-agent on small (the default). Pick the cheapest that can do the task well.

lead      small-1   own 2700 in, 270 out  $0.001012
├─ succeeded small-1   600 in, 40 out  $0.000200  model (default)  "Summarize last month's checkout timeouts from the incident notes: when, how long, what was saturated."
└─ succeeded large-1   700 in, 120 out  $0.019500  model large  "Judge the trade-off: raise the connection pool, add a read replica, or queue the writes? Pick one first step and say why."
the whole run: $0.020712; on large-1 throughout, the same tokens would cost $0.092250

answer: From the incidents and the expert's judgement: Four timeouts, each 12:00-12:15, each with the 20-connection pool full. Raise the pool to 40 first: 40 orders a second at 4 queries of about 10 ms needs 16 connections on average and more at bursts; a replica helps only the reads and adds lag, a queue changes checkout's semantics.
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Fatalf("output (-want +got):\n%s", diff)
	}
}
