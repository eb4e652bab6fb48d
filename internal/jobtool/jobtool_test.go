package jobtool

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// The bounds the model is told (Params) are the ones the runtimes hold.
func TestParamsSayTheBounds(t *testing.T) {
	var p struct {
		Properties struct {
			Message struct {
				MaxLength int `json:"maxLength"`
			} `json:"message"`
			Timeout struct {
				Minimum float64 `json:"minimum"`
				Maximum float64 `json:"maximum"`
			} `json:"timeout_seconds"`
		} `json:"properties"`
	}
	if err := json.Unmarshal([]byte(Params), &p); err != nil {
		t.Fatal(err)
	}
	if p.Properties.Message.MaxLength != MaxMessageBytes || p.Properties.Timeout.Minimum != 0 || p.Properties.Timeout.Maximum != MaxWaitSeconds {
		t.Errorf("Params says %+v, want a message of at most %d and a timeout from 0 to %d", p.Properties, MaxMessageBytes, MaxWaitSeconds)
	}
}

// A timeout the model gives is used as it is within the bounds, and
// refused past them: a huge one overflows a time.Duration into a
// negative, which must not become a look that returns at once.
func TestWaitTimeout(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, c := range []struct {
		in   *float64
		want time.Duration
		bad  bool
	}{
		{nil, 30 * time.Second, false},
		{f(0), time.Nanosecond, false},
		{f(1e-12), time.Nanosecond, false},
		{f(2.5), 2500 * time.Millisecond, false},
		{f(600), 600 * time.Second, false},
		{f(600.5), 0, true},
		{f(1e20), 0, true},
		{f(math.MaxFloat64), 0, true},
		{f(math.Inf(1)), 0, true},
		{f(-1), 0, true},
		{f(math.NaN()), 0, true},
	} {
		got, bad := WaitTimeout(c.in, 30*time.Second)
		if (bad != "") != c.bad || got != c.want {
			t.Errorf("WaitTimeout(%v) = %v, %q; want %v, refused %v", c.in, got, bad, c.want, c.bad)
		}
		if bad != "" && !strings.Contains(bad, "600 seconds") {
			t.Errorf("the refusal %q does not say the bound", bad)
		}
	}
}

// The refusals of a message name the job and say what to send.
func TestBadMessage(t *testing.T) {
	if got := BadMessage("job_1", " \n"); !strings.Contains(got, "job_1 is blank") {
		t.Errorf("a blank message: %q", got)
	}
	if got := BadMessage("job_1", strings.Repeat("x", MaxMessageBytes+1)); !strings.Contains(got, "more than 16384: send a shorter one") {
		t.Errorf("an oversized message: %q", got)
	}
	if got := BadMessage("job_1", strings.Repeat("x", MaxMessageBytes)); got != "" {
		t.Errorf("a message of exactly the bound is refused: %q", got)
	}
}
