// Package benchcpu gives benchmarks a cpu-ns/op metric: the process's CPU
// time (user and system, the garbage collector's included) per operation.
// On a shared machine it is steadier than ns/op, which counts the time
// other processes hold the cores.
package benchcpu

import (
	"testing"
	"time"
)

// Report starts counting and returns the function, deferred by the
// benchmark, that reports cpu-ns/op. Where the process's CPU time cannot
// be read it reports nothing.
func Report(b *testing.B) func() {
	start, ok := cpuTime()
	if !ok {
		return func() {}
	}
	return func() {
		end, _ := cpuTime()
		b.ReportMetric(float64((end-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// Now returns the process's CPU time so far, and whether it could be read.
func Now() (time.Duration, bool) { return cpuTime() }
