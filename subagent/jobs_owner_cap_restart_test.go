package subagent_test

import (
	"context"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/subagent"
)

// The jobs alive in one owner's threads are capped after a restart too:
// a job of one thread, running when its process stopped, counts against
// its owner in the next process before its thread is used again, so a
// spawn in the owner's other thread is refused, and the owner never has
// more jobs running than the cap once the first thread is back.
func TestOwnerJobsAreCappedAfterARestart(t *testing.T) {
	w := &keptWorld{t: t, open: keptStores[0].open(t, 0), id: callIDModes[0].id, dig: make(chan struct{}), inDig: make(chan struct{}, 1)}
	ann := func(th string) context.Context {
		return agent.WithOwner(agent.WithThread(context.Background(), th), "ann")
	}
	p := w.start(subagent.WithMaxOwnerJobs(1))
	if _, err := p.turnUnder(t, ann("t1"), "t1-turn-1", "cmd start"); err != nil {
		t.Fatal(err)
	}
	<-w.inDig
	p.stop(t)

	p = w.start(subagent.WithMaxOwnerJobs(1))
	defer func() { close(w.dig); p.stop(t) }()
	out, err := p.turnUnder(t, ann("t2"), "t2-turn-1", "cmd start")
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, th := range []string{"t1", "t2"} {
		for _, st := range p.s.Jobs(ann(th)).List() {
			if st.State == subagent.JobRunning {
				running++
			}
		}
	}
	if out.Refused != 1 || running != 1 {
		t.Errorf("after the restart the other thread's spawn was refused %d times and the owner has %d jobs running; want 1 and 1, the cap", out.Refused, running)
	}
}
