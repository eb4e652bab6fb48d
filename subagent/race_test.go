//go:build race

package subagent

// raceEnabled reports a build with the race detector, under which sync.Pool
// drops some of what it is given, so allocation counts vary.
const raceEnabled = true
