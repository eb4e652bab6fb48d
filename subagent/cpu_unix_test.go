//go:build unix

package subagent_test

import (
	"syscall"
	"testing"
	"time"
)

// reportCPU adds a cpu-ns/op metric to b: the process's CPU time (user and
// system, the garbage collector's included) per operation. On a shared
// machine it is steadier than ns/op, which counts the time other processes
// hold the cores.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
