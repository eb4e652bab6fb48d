package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/benchcpu"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/openai"
	"github.com/deputy-go/deputy/tool"
)

// BenchmarkBackgroundJob measures a whole parent run that delegates one
// task to a fork which answers at once, on the fake provider, events off:
//
//   - foreground: spawn_subagent, the child's run, the parent's answer
//     (two parent model calls).
//   - background: spawn_subagent with background=true (the job started,
//     its receipt), subagent_jobs wait (the job collected), the parent's
//     answer (three parent model calls: the wait is one more step).
//
// The model's background run has a step more than its foreground run; the
// same child started and collected from Go, in one step of the parent, is
// measured without it:
//
//   - go, foreground: a tool of the parent calls the spawner (the child
//     runs in the call).
//   - go, background: the tool starts the child with Jobs.Start and
//     collects it with Jobs.Wait.
//   - go, handed off: the tool calls the spawner as in the foreground,
//     but on a goroutine of its own that it waits for: what the Go
//     runtime charges for running the child off the caller's goroutine,
//     which any background child pays, with none of a job's bookkeeping.
//   - go, wire: the go cases, with the child's model call made through
//     the OpenAI provider over an HTTP transport that answers in memory
//     (its request encoded, its reply decoded, as a real child's are).
//
// cpu-ns/op is the process's CPU time per run. The cases run one after
// the other, foreground first, on a machine whose speed drifts: this is
// for allocations and for the profile of one case, and
// BenchmarkBackgroundJobRatio, which alternates them, is the figure of
// background against foreground (the target is within 1.2 times).
func BenchmarkBackgroundJob(b *testing.B) {
	for _, c := range backgroundJobCases {
		b.Run(c.name, func(b *testing.B) {
			run := backgroundJobRun(b, c)
			b.ReportAllocs()
			defer benchcpu.Report(b)()
			for b.Loop() {
				run()
			}
		})
	}
}

// BenchmarkBackgroundJobRatio runs the cases of BenchmarkBackgroundJob in
// alternating batches, foreground against background, the order within a
// pair of batches alternating too, and reports a run's CPU time in the
// background over its CPU time in the foreground: "go-bg/fg-cpu" for the
// child started and collected from Go (the same steps either way; the
// target is at most 1.2), "bg/fg-cpu" for the model's spawn and wait (a
// step more in the background), and "wire-go-bg/fg-cpu" for the go pair
// with the child's model call made through the OpenAI provider (its
// request encoded and its reply decoded, as a real child's are), with the
// same of wall time ("go-bg/fg", ...) and each case's CPU time and
// allocations per run; and "go-handoff/fg-cpu" ("wire-go-handoff/fg-cpu"),
// the child handed off to a goroutine of its own (the case "go, handed
// off", in the same alternation as its go pair): the part of
// go-bg/fg-cpu that is the Go runtime's, not the job's. A ratio is the
// median over windows of eight pairs of batches, as in
// BenchmarkDelegationPolicyRatio, which says why.
func BenchmarkBackgroundJobRatio(b *testing.B) {
	type ratioPair struct {
		name            string
		fg, bg, handoff func() // handoff: nil for none
	}
	var cases []ratioPair
	for i := 0; i < len(backgroundJobCases); {
		c := backgroundJobCases[i]
		name := ""
		if c.drive {
			name = "go-"
		}
		if c.wire {
			name = "wire-" + name
		}
		rp := ratioPair{name: name, fg: backgroundJobRun(b, c), bg: backgroundJobRun(b, backgroundJobCases[i+1])}
		i += 2
		if i < len(backgroundJobCases) && backgroundJobCases[i].handoff {
			rp.handoff = backgroundJobRun(b, backgroundJobCases[i])
			i++
		}
		cases = append(cases, rp)
	}
	const batch, window = 64, 8
	type pair struct {
		wall, cpu [2]time.Duration
		handoff   time.Duration // the CPU time of a batch of the pair's handoff
	}
	pairs := make([][]pair, len(cases))
	timed := func(f func()) (time.Duration, time.Duration) {
		c0, _ := benchcpu.Now()
		start := time.Now()
		for range batch {
			f()
		}
		d := time.Since(start)
		c1, _ := benchcpu.Now()
		return d, c1 - c0
	}
	for i := 0; b.Loop(); i++ {
		for k, c := range cases {
			var p pair
			if c.handoff != nil && i%2 == 0 {
				_, p.handoff = timed(c.handoff)
			}
			for _, bg := range [2]int{i % 2, 1 - i%2} {
				run := c.fg
				if bg == 1 {
					run = c.bg
				}
				p.wall[bg], p.cpu[bg] = timed(run)
			}
			if c.handoff != nil && i%2 == 1 {
				_, p.handoff = timed(c.handoff)
			}
			pairs[k] = append(pairs[k], p)
		}
	}
	median := func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	b.ReportMetric(0, "ns/op")
	for k, c := range cases {
		name := c.name
		var wall, cpu, floor []float64
		var total pair
		for w := range slices.Chunk(pairs[k], window) {
			if len(w) < window && len(pairs[k]) >= window {
				break // a last window shorter than the others
			}
			var sum pair
			for _, p := range w {
				for bg := range 2 {
					sum.wall[bg] += p.wall[bg]
					sum.cpu[bg] += p.cpu[bg]
				}
				sum.handoff += p.handoff
			}
			wall = append(wall, float64(sum.wall[1])/float64(sum.wall[0]))
			if sum.cpu[0] > 0 {
				cpu = append(cpu, float64(sum.cpu[1])/float64(sum.cpu[0]))
				floor = append(floor, float64(sum.handoff)/float64(sum.cpu[0]))
			}
		}
		for _, p := range pairs[k] {
			for bg := range 2 {
				total.wall[bg] += p.wall[bg]
				total.cpu[bg] += p.cpu[bg]
			}
		}
		perRun := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N*batch) }
		b.ReportMetric(median(wall), name+"bg/fg")
		b.ReportMetric(median(cpu), name+"bg/fg-cpu")
		if c.handoff != nil {
			b.ReportMetric(median(floor), name+"handoff/fg-cpu")
		}
		b.ReportMetric(perRun(total.cpu[0]), name+"fg-cpu-ns/op")
		b.ReportMetric(perRun(total.cpu[1]), name+"bg-cpu-ns/op")
		fgAllocs, _ := memPerRun(c.fg)
		bgAllocs, _ := memPerRun(c.bg)
		b.ReportMetric(fgAllocs, name+"fg-allocs/op")
		b.ReportMetric(bgAllocs, name+"bg-allocs/op")
	}
}

// backgroundJobCase is a case of BenchmarkBackgroundJob: the lead's
// replies, and whether it drives the child from a Go tool, in the
// background.
type backgroundJobCase struct {
	name    string
	replies []fake.Reply
	drive   bool
	bg      bool
	handoff bool // the go, foreground call, on a goroutine of its own
	// wire: the child's model is OpenAI's chat completions, through the
	// provider of package openai, over an HTTP transport that answers
	// in memory (no socket and no server in the process): the CPU time
	// a real child's model call costs its caller.
	wire bool
}

// backgroundJobCases are BenchmarkBackgroundJob's, in pairs, foreground
// then background, each go pair followed by its handoff.
var backgroundJobCases = []backgroundJobCase{
	{name: "go, foreground", replies: driveReplies, drive: true},
	{name: "go, background", replies: driveReplies, drive: true, bg: true},
	{name: "go, handed off", replies: driveReplies, drive: true, handoff: true},
	{name: "foreground", replies: []fake.Reply{
		fake.Call(SpawnToolName, `{"task":"find X"}`).For("lead"),
		fake.Text("done").For("lead"),
	}},
	{name: "background", replies: []fake.Reply{
		fake.Call(SpawnToolName, `{"task":"find X","background":true}`).For("lead"),
		fake.Call(JobsToolName, `{"action":"wait"}`).For("lead"),
		fake.Text("done").For("lead"),
	}, bg: true},
	{name: "go, wire, foreground", replies: driveReplies, drive: true, wire: true},
	{name: "go, wire, background", replies: driveReplies, drive: true, bg: true, wire: true},
	{name: "go, wire, handed off", replies: driveReplies, drive: true, handoff: true, wire: true},
}

// driveReplies are the lead's replies of a case that drives the child from
// its Go tool.
var driveReplies = []fake.Reply{fake.Call("drive", `{}`).For("lead"), fake.Text("done").For("lead")}

// chatCompletion is what wireModel answers: a chat completion of OpenAI's,
// as its API sends it.
const chatCompletion = `{"id":"chatcmpl-1","object":"chat.completion","created":1767225600,"model":"gpt-test",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"X is 42","refusal":null},"logprobs":null,"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":61,"completion_tokens":4,"total_tokens":65}}`

// wireModel is an HTTP transport that reads a request's body and answers
// chatCompletion, in memory.
type wireModel struct{}

func (wireModel) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{
		StatusCode:    http.StatusOK,
		Status:        "200 OK",
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(chatCompletion)),
		ContentLength: int64(len(chatCompletion)),
		Request:       req,
	}, nil
}

// backgroundJobRun returns one run of c's lead.
func backgroundJobRun(b *testing.B, c backgroundJobCase) func() {
	var s *Spawner
	drive := tool.Func{Def: tool.Definition{Name: "drive", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			call := func() tool.Call {
				return tool.Call{Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"find X"}`)}
			}
			if c.handoff {
				var res tool.Result
				var err error
				done := make(chan struct{})
				go func() {
					defer close(done)
					growStack(0) // as a job's goroutine does
					res, err = s.Call(ctx, call())
				}()
				<-done
				return res, err
			}
			if !c.bg {
				return s.Call(ctx, call())
			}
			jobs := s.Jobs(ctx)
			st, err := jobs.Start(ctx, Task{Task: "find X"})
			if err != nil {
				return tool.Result{}, err
			}
			got, err := jobs.Wait(ctx, WaitFor{IDs: []string{st.ID}})
			if err != nil {
				return tool.Result{}, err
			}
			return got[0].Result, got[0].Err
		}}
	p := fake.NewProvider(append(c.replies, fake.Text("X is 42").For(DefaultForkName))...).Loop().DontRecord()
	reg, err := tool.NewRegistry()
	if err != nil {
		b.Fatal(err)
	}
	if c.drive {
		if err := reg.Register(drive); err != nil {
			b.Fatal(err)
		}
	}
	var child provider.Provider = p
	if c.wire {
		if child, err = openai.New(openai.WithBaseURL("http://model.test/v1"), openai.WithAPIKey("sk-test"),
			openai.WithModel("gpt-test"), openai.WithMaxRetries(0), openai.WithHTTPClient(&http.Client{Transport: wireModel{}})); err != nil {
			b.Fatal(err)
		}
	}
	s, err = NewSpawner(child, reg, WithBackground())
	if err != nil {
		b.Fatal(err)
	}
	if err := reg.Register(s); err != nil {
		b.Fatal(err)
	}
	if err := reg.Register(s.JobsTool()); err != nil {
		b.Fatal(err)
	}
	a, err := agent.NewReact(p, agent.WithName("lead"), agent.WithRegistry(reg))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	return func() {
		a.Reset()
		out, err := a.Run(ctx, agent.Input{Text: "go"})
		if err != nil || out.ChildUsage.Requests != 1 || out.Answer != "done" {
			b.Fatalf("%v, child usage %+v, answer %q", err, out.ChildUsage, out.Answer)
		}
	}
}

// BenchmarkJobMessage measures delivering one message in memory: the
// model's subagent_jobs send call (its arguments checked, the job found,
// the message queued, its receipt written), and the job's loop taking it
// at a step boundary. The job's sub-agent waits in a model call meanwhile.
// A job is sent at most mailbox.MaxMessages in its life, so each run of
// the lead starts a job and sends it up to messagesPerJob of the b.N
// messages; the run, the job's start and its cancel are outside the
// timer, and cpu-ns/op counts only the sends and takes. Under a journal
// the loop writes one record more per step that took messages, however
// many it took (agent/inbox.go): see BenchmarkJobMessageJournaled.
func BenchmarkJobMessage(b *testing.B) {
	const messagesPerJob = 1000 // under mailbox.MaxMessages
	waiting := make(chan struct{}, 1)
	p := fake.NewProvider(
		fake.Call("drive", `{}`).For("lead"),
		fake.Text("done").For("lead"),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			waiting <- struct{}{}
			<-ctx.Done()
			return provider.Response{}, ctx.Err()
		}).For(DefaultForkName),
	).Loop().DontRecord()
	var (
		s        *Spawner
		batch    int           // the messages the next run sends
		cpu      time.Duration // of the timed sends and takes
		driveErr error
	)
	send := func(ctx context.Context) error {
		jobs := s.Jobs(ctx)
		st, err := jobs.Start(ctx, Task{Task: "find X"})
		if err != nil {
			return err
		}
		select {
		case <-waiting: // the job's sub-agent is in its model call
		case <-ctx.Done():
			return ctx.Err()
		}
		j := jobs.jt.find(st.ID)
		call := tool.Call{Name: JobsToolName, Arguments: json.RawMessage(`{"action":"send","job_id":"` + st.ID + `","message":"look under the stairs"}`)}
		t := s.JobsTool()
		c0, _ := benchcpu.Now()
		b.StartTimer()
		for step := 1; step <= batch; step++ {
			res, err := t.Call(ctx, call)
			if err == nil && res.IsError {
				err = errors.New(res.Content)
			}
			if err != nil {
				b.StopTimer()
				return fmt.Errorf("message %d to one job: %w", step, err)
			}
			if msgs := j.box.Waiting(); len(msgs) != 1 {
				b.StopTimer()
				return fmt.Errorf("message %d to one job: %d waiting, want 1", step, len(msgs))
			}
			j.box.Take(step, 1)
		}
		b.StopTimer()
		c1, _ := benchcpu.Now()
		cpu += c1 - c0
		_, err = jobs.Cancel(ctx, st.ID)
		return err
	}
	drive := tool.Func{Def: tool.Definition{Name: "drive", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			driveErr = send(ctx)
			return tool.Result{Content: "driven"}, driveErr
		}}
	reg, err := tool.NewRegistry(drive)
	if err != nil {
		b.Fatal(err)
	}
	if s, err = NewSpawner(p, reg, WithBackground()); err != nil {
		b.Fatal(err)
	}
	a, err := agent.NewReact(p, agent.WithName("lead"), agent.WithRegistry(reg))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	for sent := 0; sent < b.N; sent += batch {
		batch = min(messagesPerJob, b.N-sent)
		a.Reset()
		if _, err := a.Run(b.Context(), agent.Input{Text: "go"}); err != nil {
			b.Fatal(err)
		}
		if driveErr != nil {
			b.Fatal(driveErr)
		}
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkIdleJobs starts 1,000 background jobs whose sub-agents all
// wait in a model call, and reports what each costs while it waits:
// goroutines/job, heap-B/job and stack-B/job. Each job is one goroutine running its
// sub-agent's loop (plus the provider call's own, if the provider has
// one), because a model call in Go blocks the goroutine that makes it: a
// job waiting for its model, or for its next message between steps,
// holds that goroutine until its loop can go on.
func BenchmarkIdleJobs(b *testing.B) {
	const n = 1000
	var waiting sync.WaitGroup
	p := fake.NewProvider(
		fake.Call("drive", `{}`).For("lead"),
		fake.Text("done").For("lead"),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			waiting.Done()
			<-ctx.Done()
			return provider.Response{}, ctx.Err()
		}).For(DefaultForkName),
	).Loop().DontRecord()
	var s *Spawner
	drive := tool.Func{Def: tool.Definition{Name: "drive", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			jobs := s.Jobs(ctx)
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			g := runtime.NumGoroutine()
			waiting.Add(n)
			for range n {
				if _, err := jobs.Start(ctx, Task{Task: "wait"}); err != nil {
					return tool.Result{}, err
				}
			}
			waiting.Wait()
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(runtime.NumGoroutine()-g)/n, "goroutines/job")
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/job")
			b.ReportMetric(float64(after.StackInuse-before.StackInuse)/n, "stack-B/job")
			return tool.Result{Content: "started"}, nil
		}}
	reg, err := tool.NewRegistry(drive)
	if err != nil {
		b.Fatal(err)
	}
	if s, err = NewSpawner(p, reg, WithBackground(), WithMaxBackground(n), WithMaxSpawns(n)); err != nil {
		b.Fatal(err)
	}
	a, err := agent.NewReact(p, agent.WithName("lead"), agent.WithRegistry(reg))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		a.Reset()
		if _, err := a.Run(b.Context(), agent.Input{Text: "go"}); err != nil { // its end cancels the jobs
			b.Fatal(err)
		}
	}
}
