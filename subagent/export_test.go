package subagent

import "time"

// SetClock sets the clock the sweep of threads' jobs reads (WithJobTTL),
// before the spawner is used.
func SetClock(s *Spawner, now func() time.Time) { s.cfg.now = now }

// ThreadsHeld counts the threads whose jobs s holds in memory.
func ThreadsHeld(s *Spawner) int {
	s.threads.mu.Lock()
	defer s.threads.mu.Unlock()
	return len(s.threads.tables)
}

// WaitSweep waits for the sweep under way, if any.
func WaitSweep(s *Spawner) { s.threads.wg.Wait() }
