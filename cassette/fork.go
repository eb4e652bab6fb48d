package cassette

import (
	"errors"
	"strconv"
	"strings"

	"github.com/deputy-go/deputy/provider"
)

// Fork returns a Provider that replays a recorded run up to the nodes
// pattern names and continues from them on live: another provider, model
// or prompt. A call at a position pattern matches (as Rerecord matches
// them: the node and everything under it) goes to live, never to the
// cassette, so that a node given another prompt runs too. Once such a
// call has run, what it leads to goes to live as well: the later calls of
// every agent above it (which read its new answer), and the sub-agents
// those calls start. Every other call is replayed, and one the cassette
// has no answer for fails with a *MissError, as in Replay: the calls
// before the fork, and those of siblings that run beside it, never reach
// live.
//
// The Provider's Cassette is the forked run: the entries it replayed and
// the calls it made on live, which a later test replays as it would any
// recording. Run the tree once on Replay(c) and once on the fork to set
// the two runs side by side (treetest.CompareRuns).
func Fork(c *Cassette, live provider.Provider, pattern string, opts ...Option) (*Provider, error) {
	if c == nil {
		return nil, errors.New("cassette: a fork needs the cassette of the run it forks: Load it")
	}
	match, err := Matcher(pattern)
	if err != nil {
		return nil, err
	}
	if live == nil {
		return nil, errors.New("cassette: a fork needs the provider it continues on")
	}
	p := newProvider(c, live, opts)
	p.match = match
	p.fork = &forkState{pending: map[string]bool{}, liveFrom: map[string]int{}, lastStep: map[string]int{}}
	return p, nil
}

// forkState is what a fork knows of the run so far; guarded by
// Provider.mu.
type forkState struct {
	// pending holds the agents above a node of the fork that has run on
	// live: their next call reads its answer, and goes to live.
	pending map[string]bool
	// liveFrom holds the agents that have gone on on live, each with the
	// last step of theirs that had started a sub-agent before (the step
	// in a position's "@step.index"): a sub-agent started by a later
	// step was started by a live answer, and runs on live too.
	liveFrom map[string]int
	// lastStep is, for each agent, the last step of its that started a
	// sub-agent seen so far.
	lastStep map[string]int
	// replayed are the entries the fork answered from, each at the step
	// of the call it answered.
	replayed []Entry
}

// live reports whether a fork's call at pos goes to live, and notes the
// call; called with Provider.mu held.
func (f *forkState) live(pos string, forked bool) bool {
	parent, step := splitPosition(pos)
	if parent != "" && step > f.lastStep[parent] {
		f.lastStep[parent] = step
	}
	switch {
	case forked:
		for a := pos; ; {
			i := strings.LastIndexByte(a, '/')
			if i < 0 {
				break
			}
			a = a[:i]
			if _, ok := f.liveFrom[a]; !ok {
				f.pending[a] = true
			}
		}
		return true
	case f.pending[pos]:
		delete(f.pending, pos)
		f.liveFrom[pos] = f.lastStep[pos]
		return true
	}
	if _, ok := f.liveFrom[pos]; ok {
		return true
	}
	// A sub-agent started by a live answer, or under one.
	for p := pos; ; {
		parent, step := splitPosition(p)
		if parent == "" {
			return false
		}
		if from, ok := f.liveFrom[parent]; ok && step > from {
			return true
		}
		p = parent
	}
}

// splitPosition returns the position of the agent that started the one
// at pos and the step of its that did, or "" and 0 for a top-level
// position or one started outside a step.
func splitPosition(pos string) (parent string, step int) {
	i := strings.LastIndexByte(pos, '/')
	if i < 0 {
		return "", 0
	}
	parent, seg := pos[:i], pos[i+1:]
	at := strings.LastIndexByte(seg, '@')
	if at < 0 {
		return parent, 0
	}
	s, _, _ := strings.Cut(seg[at+1:], ".")
	n, err := strconv.Atoi(s)
	if err != nil {
		return parent, 0
	}
	return parent, n
}
