package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/benchcpu"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// countingBackend is a store backend that counts the journal records it
// writes.
type countingBackend struct {
	store.Backend
	mu   sync.Mutex
	keys []string // of the journal records written, in order
}

func (c *countingBackend) Put(ctx context.Context, writes ...store.Write) error {
	err := c.Backend.Put(ctx, writes...)
	if err == nil {
		c.mu.Lock()
		for _, w := range writes {
			if strings.HasPrefix(w.Key, "j/") {
				c.keys = append(c.keys, w.Key)
			}
		}
		c.mu.Unlock()
	}
	return err
}

// written returns the keys of the journal records written so far.
func (c *countingBackend) written() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.keys...)
}

// messageBench is a journaled lead (on the embedded store) whose drive
// tool starts a background fork and then steps it, one step at a time:
// each step the fork's model asks for is held until step lets it go, and
// step returns how many messages from the lead the next request carries.
// Each of the fork's steps calls the tool pause, with the call id
// callID gives it.
type messageBench struct {
	be    *countingBackend
	s     *subagent.Spawner
	go_   chan struct{} // lets the fork's held model call answer
	asked chan int      // the messages delivered before each model call of the fork
}

func newMessageBench(tb testing.TB, callID func(step int) string, drive func(ctx context.Context, mb *messageBench) error) *messageBench {
	be, err := sqlite.Open(filepath.Join(tb.TempDir(), "deputy.db"))
	if err != nil {
		tb.Fatal(err)
	}
	mb := &messageBench{be: &countingBackend{Backend: be}, go_: make(chan struct{}), asked: make(chan int)}
	st, err := store.New(mb.be)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	steps := 0
	child := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		steps++ // one model call of the fork at a time
		n := 0
		if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleUser && strings.Contains(last.Content, "from the agent that started you") {
			n = strings.Count(last.Content, "msg_")
		}
		select {
		case mb.asked <- n:
		case <-ctx.Done():
			return provider.Response{}, ctx.Err()
		}
		select {
		case <-mb.go_:
		case <-ctx.Done():
			return provider.Response{}, ctx.Err()
		}
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: callID(steps), Name: "pause", Arguments: json.RawMessage(`{}`)}), Usage: provider.Usage{Requests: 1}}, nil
	}).For(subagent.DefaultForkName)
	p := fake.NewProvider(fake.Call("drive", `{}`).For("lead"), fake.Text("done").For("lead"), child).Loop().DontRecord()
	pause := tool.Func{Def: tool.Definition{Name: "pause", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) { return tool.Result{Content: "paused"}, nil }}
	var driveErr error
	driveTool := tool.Func{Def: tool.Definition{Name: "drive", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			driveErr = drive(ctx, mb)
			return tool.Result{Content: "driven"}, driveErr
		}}
	reg, err := tool.NewRegistry(driveTool, pause)
	if err != nil {
		tb.Fatal(err)
	}
	if mb.s, err = subagent.NewSpawner(p, reg, subagent.WithBackground(), subagent.WithJobLimits(subagent.JobLimits{Steps: 1 << 30})); err != nil {
		tb.Fatal(err)
	}
	j, err := st.Journal(tb.Context(), "message-bench")
	if err != nil {
		tb.Fatal(err)
	}
	a, err := agent.NewReact(p, agent.WithName("lead"), agent.WithRegistry(reg))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := a.Run(agent.WithJournal(tb.Context(), j), agent.Input{Text: "go"}); err != nil {
		tb.Fatal(err)
	}
	if driveErr != nil { // the lead read it as a tool's error and went on
		tb.Fatal(driveErr)
	}
	return mb
}

// step lets the fork's held model call answer and returns the messages
// delivered before its next one.
func (mb *messageBench) step(ctx context.Context) (int, error) {
	select {
	case mb.go_ <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	select {
	case n := <-mb.asked:
		return n, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// BenchmarkJobMessageJournaled measures delivering one message to a
// background fork under a journal on the embedded store (SQLite, WAL,
// synchronous=NORMAL): the lead's send (subagent_jobs send, called by a
// tool of the lead), and one step of the fork, which takes the message
// before its model call. A step of the fork writes its model's answer
// and its tool call to the journal whether or not it took a message;
// journal-records/message is what a step that took one writes beyond
// that, journal-records/op all that a step wrote. cpu-ns/op and ns/op
// include the step's commits. A job is sent at most mailbox.MaxMessages
// in its life, so each lead, on a store of its own, starts a job and
// sends it up to messagesPerJob of the b.N messages; the store, the
// lead's run, the job's start, its first step and its cancel are outside
// the timer and cpu-ns/op.
func BenchmarkJobMessageJournaled(b *testing.B) {
	const messagesPerJob = 1000 // under mailbox.MaxMessages
	var (
		cpu            time.Duration // of the timed sends and steps
		written, plain int           // journal records of the timed steps, and of as many steps that took no message
	)
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	for sent, batch := 0, 0; sent < b.N; sent += batch {
		batch = min(messagesPerJob, b.N-sent)
		newMessageBench(b, func(int) string { return "call_0" }, func(ctx context.Context, mb *messageBench) error {
			jobs := mb.s.Jobs(ctx)
			st, err := jobs.Start(ctx, subagent.Task{Task: "find X"})
			if err != nil {
				return err
			}
			if n := <-mb.asked; n != 0 {
				return fmt.Errorf("the first step took %d messages", n)
			}
			before := len(mb.be.written())
			if _, err := mb.step(ctx); err != nil {
				return err
			}
			plain += (len(mb.be.written()) - before) * batch
			send := tool.Call{Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"send","job_id":"` + st.ID + `","message":"look under the stairs"}`)}
			t := mb.s.JobsTool()
			before = len(mb.be.written())
			c0, _ := benchcpu.Now()
			b.StartTimer()
			for i := range batch {
				res, err := t.Call(ctx, send)
				if err == nil && res.IsError {
					err = errors.New(res.Content)
				}
				if err != nil {
					b.StopTimer()
					return fmt.Errorf("message %d to one job: %w", i+1, err)
				}
				if n, err := mb.step(ctx); err != nil || n != 1 {
					b.StopTimer()
					return fmt.Errorf("message %d to one job: the step took %d messages (%v), want 1", i+1, n, err)
				}
			}
			b.StopTimer()
			c1, _ := benchcpu.Now()
			cpu += c1 - c0
			written += len(mb.be.written()) - before
			_, err = jobs.Cancel(ctx, st.ID)
			return err
		})
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(written)/float64(b.N), "journal-records/op")
	b.ReportMetric(float64(written-plain)/float64(b.N), "journal-records/message")
}

// A background child under a journal records the messages it takes
// before a step in one journal record, however many it takes: a step
// that takes one or two writes one record more than a step that takes
// none (its model's answer and its tool call are recorded either way),
// and that record is the step's messages. In the three id modes.
func TestJobMessageWritesOneJournalRecord(t *testing.T) {
	for _, mode := range []struct {
		name string
		ids  int
	}{{"fresh ids", resumetest.IDsFresh}, {"no ids", resumetest.IDsNone}, {"ids restarting at call_0", resumetest.IDsRestart}} {
		t.Run(mode.name, func(t *testing.T) {
			var fresh atomic.Int64
			callID := func(int) string {
				calls := []provider.ToolCall{{Name: "pause"}}
				resumetest.NameCalls(mode.ids, calls, &fresh)
				return calls[0].ID
			}
			var none, one, two []string
			newMessageBench(t, callID, func(ctx context.Context, mb *messageBench) error {
				jobs := mb.s.Jobs(ctx)
				st, err := jobs.Start(ctx, subagent.Task{Task: "find X"})
				if err != nil {
					return err
				}
				if n := <-mb.asked; n != 0 {
					return fmt.Errorf("the first step took %d messages", n)
				}
				// stepWith sends msgs, lets the child step once, and returns
				// the keys of the journal records written meanwhile.
				stepWith := func(msgs ...string) ([]string, error) {
					before := len(mb.be.written())
					for _, m := range msgs {
						if _, err := jobs.Send(ctx, st.ID, m); err != nil {
							return nil, err
						}
					}
					n, err := mb.step(ctx)
					if err == nil && n != len(msgs) {
						err = fmt.Errorf("the step took %d messages, want %d", n, len(msgs))
					}
					return mb.be.written()[before:], err
				}
				if none, err = stepWith(); err != nil {
					return err
				}
				if one, err = stepWith("look under the stairs"); err != nil {
					return err
				}
				if two, err = stepWith("and in the attic", "and in the shed"); err != nil {
					return err
				}
				_, err = jobs.Cancel(ctx, st.ID)
				return err
			})
			mail := func(keys []string) int {
				n := 0
				for _, k := range keys {
					if strings.HasSuffix(k, "/in") {
						n++
					}
				}
				return n
			}
			if len(none) == 0 || mail(none) != 0 {
				t.Fatalf("a step that took no message wrote %q", none)
			}
			for _, got := range [][]string{one, two} {
				if len(got) != len(none)+1 || mail(got) != 1 {
					t.Errorf("a step that took messages wrote %q; one that took none %q: want one record more, its messages", got, none)
				}
			}
		})
	}
}
