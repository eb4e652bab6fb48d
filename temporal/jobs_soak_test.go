//go:build unix

package temporal

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

var soakSeed = flag.Uint64("soak-seed", 0, "the seed of TestBackgroundSoakSurvivesSIGKILLOnTemporal (0: a random one, logged)")

// The soak's shape, as the core's (subagent's
// TestBackgroundSoakSurvivesSIGKILL): a lead starts soakChildren children
// in the background and sends them soakMessages messages each, in a random
// order and in steps of up to four sends that may name one child more than
// once; soakPublishers of the children, once they have every message, make
// a call a person must approve, and the lead, once it has collected them
// all, one more. soakTokens is the lead's token limit, soakJobTokens each
// child's.
const (
	soakChildren   = 8
	soakMessages   = 3
	soakPublishers = 3
	soakKills      = 3
	soakTokens     = 2_000_000
	soakJobTokens  = 200_000
	soakEnv        = "DEPUTY_TEST_TEMPORAL_SOAK_WORKER"
)

// soakWorker is what the test tells a worker process it starts.
type soakWorker struct {
	Seed    uint64 `json:"seed"`
	Mode    int    `json:"mode"`    // an index of policyIDModes
	CrashAt int64  `json:"crashAt"` // the model or tool call at which the process kills itself (0: never)
	Log     string `json:"log"`     // the world's log, shared by every process
	Queue   string `json:"queue"`
}

// TestBackgroundSoakSurvivesSIGKILLOnTemporal is the core's soak on
// Temporal: a lead (an agent workflow) starts 8 background children (child
// workflows) and sends them 24 messages (signals) in random order, several
// to one child in one step at times; three children, and then the lead,
// make a call a person approves or declines (the test answers through
// Pending and Answer). The workflows run on a worker in a process of its
// own, which kills itself with SIGKILL three times at random model calls
// and tool calls (before the tool acts, an approved one included); each
// time the test starts another. The models and tools bill and log
// what they do in a file that outlives the processes. At the end every
// child answered once and its workflow completed, the lead started no
// other, every message reached its child once and in the order the lead
// sent it, with the number its receipt gave it, each approved call ran
// once and a declined one never, no model answer was billed twice, and
// what the lead reports spent is what the models billed, within its limit
// and each child within its own. It runs with models that name their
// calls afresh, not at all, and from call_0, the three at once.
//
// The one window a kill is kept out of is the one nothing can close on
// Temporal either (an activity runs at least once): between a model's
// answer or a tool's effect and the server's having recorded its
// activity's result. At the call it is to die, the worker stops new
// answers and effects, waits until the server has acknowledged every
// result that holds one given (the client's gRPC calls are watched), lets
// the rest of the process run on a few milliseconds, and is killed
// wherever that leaves it: in the middle of workflow tasks, signals,
// updates, and the activity it stopped, which the server gives to the
// next worker once its attempt times out.
func TestBackgroundSoakSurvivesSIGKILLOnTemporal(t *testing.T) {
	if spec := os.Getenv(soakEnv); spec != "" {
		runSoakWorker(t, spec)
		return
	}
	hostPort, ns := serverAddr(t)
	if testing.Short() {
		t.Skip("starts worker processes and kills them")
	}
	c, err := Dial(context.Background(), hostPort, ns, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seed := *soakSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d: rerun it with go test -run 'TestBackgroundSoakSurvivesSIGKILLOnTemporal' -soak-seed %d", seed, seed)
	start := time.Now()
	// The three at once, whatever -parallel says: each mostly waits for
	// the server to give a killed worker's work to the next.
	var wg sync.WaitGroup
	for mode, m := range policyIDModes {
		wg.Go(func() {
			t.Run(m.name, func(t *testing.T) {
				temporalSoak(t, c, seed, mode)
				if t.Failed() {
					t.Logf("rerun it: go test -run 'TestBackgroundSoakSurvivesSIGKILLOnTemporal' -soak-seed %d", seed)
				}
			})
		})
	}
	wg.Wait()
	t.Logf("three id modes in %v", time.Since(start).Round(time.Millisecond))
}

// temporalSoak runs the soak of seed in id mode to its end and checks it.
func temporalSoak(t *testing.T, c client.Client, seed uint64, mode int) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	began := time.Now()
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(seed, uint64(mode)))
	plan := newSoakPlan(seed)
	queue := fmt.Sprintf("deputy-soak-%d-%d", mode, time.Now().UnixNano())
	lead := queue + "-lead"
	logPath := filepath.Join(dir, "world.log")

	// The worker processes, one at a time.
	procs := newWorkerProcs(t, "TestBackgroundSoakSurvivesSIGKILLOnTemporal", soakEnv)
	startWorker := func(crashAt int64) *workerProc {
		return procs.start(soakWorker{Seed: seed, Mode: mode, CrashAt: crashAt, Log: logPath, Queue: queue})
	}
	kills := 0
	nextCrash := func() int64 {
		left := int64(soakKills - kills)
		if left == 0 {
			return 0
		}
		// A random model or tool call among those the tree has yet to
		// make (as far as the plan tells: a tool call after about each
		// model call), a share for each kill left, so that the kills are
		// spread over the run and all come before it ends.
		w := readSoakLog(t, logPath)
		return 1 + r.Int64N(max(1, 2*(plan.calls()-w.billed.Requests)/left))
	}
	current := startWorker(nextCrash())

	spec := Spec{Name: "lead", Provider: "m", Tools: []string{"record", "nap", "publish", "deploy"}, Spawn: true, Background: true,
		TokenLimit: soakTokens, JobTokens: soakJobTokens, JobSteps: 200, MaxSteps: 100, ActivityTimeout: 5 * time.Second}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: lead, TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: spec, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		out RunOutput
		err error
	}
	finished := make(chan result, 1)
	go func() {
		var out RunOutput
		err := run.Get(ctx, &out)
		finished <- result{out, err}
	}()

	// The person: answers each question the tree asks, once, approving
	// two in three, whichever worker holds the lead meanwhile.
	var mu sync.Mutex
	asked := map[string]string{}  // question → its interrupt id
	approved := map[string]bool{} // question → the answer
	var twice []string            // questions asked again under another id
	actx, stopAnswering := context.WithCancel(ctx)
	var answering sync.WaitGroup
	answering.Add(1)
	go func() {
		defer answering.Done()
		for actx.Err() == nil {
			select {
			case <-actx.Done():
				return
			case <-time.After(150 * time.Millisecond):
			}
			qctx, qcancel := context.WithTimeout(actx, 3*time.Second)
			pending, err := Pending(qctx, c, lead)
			qcancel()
			if err != nil {
				continue // no worker holds the lead yet
			}
			for _, it := range pending {
				mu.Lock()
				if id, ok := asked[it.Message]; ok && id != it.ID {
					twice = append(twice, fmt.Sprintf("%q as %s, first as %s", it.Message, it.ID, id))
				}
				asked[it.Message] = it.ID
				yes, ok := approved[it.Message]
				if !ok {
					yes = r.IntN(3) > 0
					approved[it.Message] = yes
				}
				mu.Unlock()
				_ = Answer(actx, c, lead, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(fmt.Sprintf(`{"approved":%v}`, yes))})
			}
		}
	}()

	var res result
	var killedAt []string
wait:
	for {
		select {
		case res = <-finished:
			break wait
		case <-current.exited:
			if !current.killed() {
				stopAnswering()
				answering.Wait()
				t.Fatalf("seed %d: worker %d ended by itself: %v", seed, len(procs.all), current.err)
			}
			kills++
			killedAt = append(killedAt, time.Since(began).Round(time.Millisecond).String())
			mu.Lock() // the person's random answers and the kills share r
			crashAt := nextCrash()
			mu.Unlock()
			current = startWorker(crashAt)
		}
	}
	stopAnswering()
	answering.Wait()
	if res.err != nil {
		t.Fatalf("seed %d: the lead failed: %v", seed, res.err)
	}
	out := res.out
	w := readSoakLog(t, logPath)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("seed %d: %s", seed, fmt.Sprintf(format, args...))
	}
	if w.stuck != "" {
		fail("%s", w.stuck)
	}
	if kills != soakKills {
		fail("%d kills, want %d", kills, soakKills)
	}
	for _, q := range twice {
		fail("asked again: %s", q)
	}
	// Every message once, in the order the lead sent it, to its child.
	for ch := range soakChildren {
		child := fmt.Sprint("c", ch)
		if got, want := w.recorded[child], plan.order(ch); !slices.Equal(got, want) {
			fail("child %s recorded %v, want %v: each message once, in the order sent", child, got, want)
		}
	}
	// Each message numbered by its place among its child's, by every
	// receipt the lead read.
	for s := range w.seqs {
		var ch, m, seq int
		if _, err := fmt.Sscanf(s, "c%d-m%d %d", &ch, &m, &seq); err != nil || seq != m+1 {
			fail("a receipt numbered message %s, want c%d-m%d %d", s, ch, m, m+1)
		}
	}
	if len(w.seqs) != soakChildren*soakMessages {
		fail("the lead read %d receipts, want %d", len(w.seqs), soakChildren*soakMessages)
	}
	// Each approved call once, a declined one never.
	want := map[string]int{}
	for q, yes := range approved {
		if yes {
			want[strings.Fields(q)[1]+" "+approvedSubject(q)]++
		}
	}
	for ch := range soakChildren {
		if _, ok := asked[publishQuestion(ch)]; ok != plan.publishes(ch) {
			fail("child c%d asked to publish: %v, want %v", ch, ok, plan.publishes(ch))
		}
	}
	if _, ok := asked[deployQuestion]; !ok {
		fail("the lead was to ask to deploy; it never did")
	}
	for what, n := range w.effects {
		if n != want[what] {
			fail("%s ran %d times, want %d (approved: %v)", what, n, want[what], want[what] > 0)
		}
	}
	for what, n := range want {
		if w.effects[what] != n {
			fail("%s ran %d times, want %d", what, w.effects[what], n)
		}
	}
	// Every model answer billed once: no step of an agent was asked twice.
	for fp, n := range w.paid {
		if n > 1 {
			fail("%s was billed %d times", fp, n)
		}
	}
	// Every child finished once: the lead collected each once, and its
	// answer names its messages.
	for ch := range soakChildren {
		answer := fmt.Sprintf("c%d answers %s", ch, strings.Join(plan.order(ch), ","))
		if n := strings.Count(out.Answer, answer); n != 1 {
			fail("the lead's answer holds %q %d times, want once: %q", answer, n, out.Answer)
		}
	}
	if !strings.HasPrefix(out.Answer, "all done") {
		fail("the lead answered %q", out.Answer)
	}
	// What the lead reports is what the models billed, within its limit
	// and each child within its own.
	if got := out.TotalUsage(); got != w.billed {
		fail("the lead reports %+v spent, the models billed %+v", got, w.billed)
	}
	if got := out.TotalUsage().Tokens(); got > soakTokens {
		fail("the tree spent %d tokens, past its limit of %d", got, soakTokens)
	}
	for who, n := range w.spent {
		if who != "lead" && n > soakJobTokens {
			fail("child %s spent %d tokens, past its limit of %d", who, n, soakJobTokens)
		}
	}
	// Nothing orphaned: the lead started its 8 children, once each, and
	// every one has completed.
	_, _, children := historyOf(t, c, lead)
	if len(children) != soakChildren {
		fail("the lead started %d child workflows, want %d: %v", len(children), soakChildren, children)
	}
	for _, id := range append(children, lead) {
		d, err := describe(ctx, c, id)
		if err != nil {
			t.Fatal(err)
		}
		if st := d.WorkflowExecutionInfo.Status; st != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			fail("workflow %s is %v, want completed", id, st)
		}
	}
	t.Logf("seed %d: %d worker processes, %d killed (at calls %v, m a model's and t a tool's, %v into the run), %d model answers billed, %d tokens, %d questions, in %v",
		seed, len(procs.all), kills, w.kills, killedAt, w.billed.Requests, w.billed.Tokens(), len(asked), time.Since(began).Round(time.Millisecond))
}

// soakPlan is the order of the lead's sends, and which children ask to
// publish.
type soakPlan struct {
	steps      [][]string // the sends of each step, "c3-m1" for child 3's second message
	publishers []int
}

func newSoakPlan(seed uint64) soakPlan {
	r := rand.New(rand.NewPCG(seed, 0x91a2))
	var all []int // a child per message
	for ch := range soakChildren {
		for range soakMessages {
			all = append(all, ch)
		}
	}
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	next := make([]int, soakChildren)
	var p soakPlan
	for len(all) > 0 {
		n := min(len(all), 1+r.IntN(4))
		var step []string
		for _, ch := range all[:n] {
			step = append(step, fmt.Sprintf("c%d-m%d", ch, next[ch]))
			next[ch]++
		}
		all = all[n:]
		p.steps = append(p.steps, step)
	}
	p.publishers = r.Perm(soakChildren)[:soakPublishers]
	return p
}

// calls is about how many model calls the tree makes: the lead's (start,
// a step per batch of sends, a wait, the deploy, the answer) and the
// children's (a record per message, the publishers' publish, an answer),
// without the naps.
func (p soakPlan) calls() int64 {
	lead := 1 + len(p.steps) + 1 + 2
	children := soakChildren*(soakMessages+1) + len(p.publishers)
	return int64(lead + children)
}

// message is the plan's k-th message, in the order the lead sends them.
func (p soakPlan) message(k int) string {
	for _, step := range p.steps {
		if k < len(step) {
			return step[k]
		}
		k -= len(step)
	}
	return ""
}

// order is the messages of child c in the order the lead sends them.
func (p soakPlan) order(c int) []string {
	var out []string
	for _, step := range p.steps {
		for _, m := range step {
			if strings.HasPrefix(m, fmt.Sprintf("c%d-", c)) {
				out = append(out, m)
			}
		}
	}
	return out
}

func (p soakPlan) publishes(c int) bool { return slices.Contains(p.publishers, c) }

const deployQuestion = `Allow deploy with {"what":"all"}?`

func publishQuestion(c int) string { return fmt.Sprintf(`Allow publish with {"what":"c%d"}?`, c) }

// approvedSubject returns what an approval question is about: "all", "c3".
func approvedSubject(q string) string {
	m := regexp.MustCompile(`"what":"([^"]+)"`).FindStringSubmatch(q)
	if m == nil {
		return ""
	}
	return m[1]
}

// soakWorld is what the log of the soak's processes says happened.
type soakWorld struct {
	billed   provider.Usage
	spent    map[string]int64    // tokens billed, by agent ("lead", "c3")
	paid     map[string]int      // model answers billed, by agent and step
	recorded map[string][]string // by child: the messages it recorded, in order
	effects  map[string]int      // approved calls made: "publish c3", "deploy all"
	issued   map[string]int      // by child: the messages the lead's model sent it
	seqs     map[string]bool     // "c3-m1 2": a message and a number a receipt gave it
	kills    []string
	stuck    string
}

func readSoakLog(t *testing.T, path string) soakWorld {
	t.Helper()
	w, err := readSoakWorld(path)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func readSoakWorld(path string) (soakWorld, error) {
	w := soakWorld{spent: map[string]int64{}, paid: map[string]int{}, recorded: map[string][]string{}, effects: map[string]int{}, issued: map[string]int{}, seqs: map[string]bool{}}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return w, err
	}
	issued := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasSuffix(sc.Text(), ".") && f[0] != "stuck:" {
			continue // a line cut by the kill
		}
		f[len(f)-1] = strings.TrimSuffix(f[len(f)-1], ".")
		switch f[0] {
		case "bill": // bill <agent/step> <input tokens> <output tokens>
			in, _ := strconv.ParseInt(f[2], 10, 64)
			out, _ := strconv.ParseInt(f[3], 10, 64)
			w.billed = w.billed.Add(provider.Usage{InputTokens: in, OutputTokens: out, Requests: 1})
			w.paid[f[1]]++
			w.spent[f[1][:strings.Index(f[1], "/")]] += in + out
		case "record": // record <message>
			child := f[1][:strings.Index(f[1], "-")]
			w.recorded[child] = append(w.recorded[child], f[1])
		case "issue": // issue <message>
			if !issued[f[1]] {
				issued[f[1]] = true
				w.issued[f[1][:strings.Index(f[1], "-")]]++
			}
		case "seq": // seq <message> <its number in the lead's receipt>
			w.seqs[f[1]+" "+f[2]] = true
		case "effect": // effect <tool> <subject>
			w.effects[f[1]+" "+f[2]]++
		case "kill": // kill <m or t, and the process's model or tool call at which it died>
			w.kills = append(w.kills, f[1])
		case "stuck:":
			w.stuck = sc.Text()
		}
	}
	return w, nil
}

// soakProc is the world inside one worker process: its models and tools,
// the log they write, and the gate that keeps a kill out of the window
// between an answer or an effect and the server's record of it.
type soakProc struct {
	*killGate
	plan    soakPlan
	id      func(i int) string
	crashAt int64
	calls   atomic.Int64 // model and tool calls made in this process
	logPath string
	logMu   sync.Mutex
	logf    *os.File
}

// log appends a line to the world's log, ended with a dot so that a line
// cut by the kill can be told.
func (p *soakProc) log(format string, args ...any) {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	_, _ = fmt.Fprintf(p.logf, format+".\n", args...)
}

// point counts a model call (kind m) or a tool call (t), and kills the
// process at the one it is to die at.
func (p *soakProc) point(kind string) {
	if n := p.calls.Add(1); n == p.crashAt {
		p.kill(kind + strconv.FormatInt(n, 10))
	}
}

var (
	soakChild   = regexp.MustCompile(`^child (c\d+)$`)
	soakInbound = regexp.MustCompile(`from the agent that started you:\n(c\d+-m\d+)`)
	soakAnswers = regexp.MustCompile(`c\d+ answers [c\d,m-]+`)
)

func (p *soakProc) model(ctx context.Context, req provider.Request) (provider.Response, error) {
	p.point("m")
	mark := p.pass("a")
	steps := 0
	for _, m := range req.Messages {
		if m.Role == provider.RoleAssistant {
			steps++
		}
	}
	var msg provider.Message
	who := "lead"
	if m := soakChild.FindStringSubmatch(firstUserOf(req)); m != nil {
		who = m[1]
		msg = p.child(req, who)
	} else {
		msg = p.lead(req)
	}
	msg.Content = strings.TrimSpace(msg.Content + " " + mark)
	for i := range msg.ToolCalls {
		msg.ToolCalls[i].ID = p.id(i)
	}
	b, _ := json.Marshal(req.Messages)
	u := provider.Usage{InputTokens: 1 + int64(len(b)+len(req.System))/4, OutputTokens: 1 + int64(len(msg.Content))/4, Requests: 1}
	for _, c := range msg.ToolCalls {
		u.OutputTokens += int64(len(c.Arguments)) / 4
	}
	p.log("bill %s/%d %d %d", who, steps, u.InputTokens, u.OutputTokens)
	stop := provider.StopEndTurn
	if len(msg.ToolCalls) > 0 {
		stop = provider.StopToolUse
	}
	return provider.Response{Message: msg, Usage: u, StopReason: stop}, nil
}

// lead starts the children, sends the plan's messages a step at a time,
// waits until it has collected every child, asks to deploy, and answers
// with what the children answered.
func (p *soakProc) lead(req provider.Request) provider.Message {
	var jobs, answers []string
	sent, deployed := 0, false
	for _, m := range req.Messages {
		if m.Role != provider.RoleTool {
			continue
		}
		var v map[string]any
		_ = json.Unmarshal([]byte(m.Content), &v)
		switch {
		case v["message_id"] != nil:
			// The receipt of the plan's next message: the lead logs its
			// number, which every worker must give alike.
			if text := p.plan.message(sent); text != "" {
				p.log("seq %s %v", text, v["seq"])
			}
			sent++
		case v["job_id"] != nil && v["status"] == "running":
			jobs = append(jobs, v["job_id"].(string))
		case strings.Contains(m.Content, "deploy"):
			deployed = true
		default:
			answers = append(answers, soakAnswers.FindAllString(m.Content, -1)...)
		}
	}
	call := func(name, args string) provider.ToolCall {
		return provider.ToolCall{Name: name, Arguments: json.RawMessage(args)}
	}
	switch {
	case len(jobs) == 0:
		var calls []provider.ToolCall
		for ch := range soakChildren {
			calls = append(calls, call(SpawnToolName, fmt.Sprintf(`{"task":"child c%d","background":true}`, ch)))
		}
		return provider.AssistantMessage("starting", calls...)
	case len(jobs) < soakChildren:
		return provider.AssistantMessage(fmt.Sprintf("started %d children of %d", len(jobs), soakChildren))
	case sent < soakChildren*soakMessages:
		k := 0
		for _, step := range p.plan.steps {
			if k == sent {
				var calls []provider.ToolCall
				for _, text := range step {
					ch, _ := strconv.Atoi(text[1:strings.Index(text, "-")])
					p.log("issue %s", text)
					calls = append(calls, call(subagent.JobsToolName, fmt.Sprintf(`{"action":"send","job_id":%q,"message":%q}`, jobs[ch], text)))
				}
				return provider.AssistantMessage("sending", calls...)
			}
			k += len(step)
		}
		return provider.AssistantMessage("lost count of the sends: " + strconv.Itoa(sent))
	case len(answers) < soakChildren:
		return provider.AssistantMessage("waiting", call(subagent.JobsToolName, `{"action":"wait","timeout_seconds":600}`))
	case !deployed:
		return provider.AssistantMessage("deploying", call("deploy", `{"what":"all"}`))
	}
	slices.Sort(answers)
	return provider.AssistantMessage("all done: " + strings.Join(answers, "; "))
}

// child records each message it received, one a step, in order, naps
// while it waits for more, asks to publish if it is one of the plan's
// publishers, and answers with its messages.
func (p *soakProc) child(req provider.Request, who string) provider.Message {
	var got, recorded []string
	published := false
	naps := 0
	for _, m := range req.Messages {
		switch m.Role {
		case provider.RoleUser:
			for _, sm := range soakInbound.FindAllStringSubmatch(m.Content, -1) {
				got = append(got, sm[1])
			}
		case provider.RoleTool:
			switch {
			case strings.HasPrefix(m.Content, "recorded "):
				recorded = append(recorded, strings.Fields(m.Content)[1])
				naps = 0
			case strings.HasPrefix(m.Content, "rested"):
				naps++
			case strings.Contains(m.Content, "publish"):
				published = true
			}
		}
	}
	ch, _ := strconv.Atoi(who[1:])
	call := func(name, args string) provider.ToolCall {
		return provider.ToolCall{Name: name, Arguments: json.RawMessage(args)}
	}
	switch {
	case len(recorded) < len(got):
		return provider.AssistantMessage("", call("record", fmt.Sprintf(`{"text":%q}`, got[len(recorded)])))
	case len(recorded) < soakMessages:
		return provider.AssistantMessage("", call("nap", fmt.Sprintf(`{"child":%q,"have":%d,"naps":%d}`, who, len(got), naps)))
	case p.plan.publishes(ch) && !published:
		return provider.AssistantMessage("", call("publish", fmt.Sprintf(`{"what":%q}`, who)))
	}
	return provider.AssistantMessage(fmt.Sprintf("%s answers %s", who, strings.Join(recorded, ",")))
}

// nap waits until the lead's model has sent the child more messages than
// it has, or for 2 s, but at least 100 ms doubled for each nap in a row,
// up to 2 s: a message sent reaches the child at its step after.
func (p *soakProc) nap(ctx context.Context, c tool.Call) (tool.Result, error) {
	p.point("t")
	var a struct {
		Child      string
		Have, Naps int
	}
	if err := json.Unmarshal(c.Arguments, &a); err != nil {
		return tool.Result{}, err
	}
	least := min(100*time.Millisecond<<min(a.Naps, 5), 2*time.Second)
	begun := time.Now()
	for {
		w, err := readSoakWorld(p.logPath)
		if err != nil {
			return tool.Result{}, err
		}
		since := time.Since(begun)
		if since >= 2*time.Second || since >= least && w.issued[a.Child] > a.Have {
			return tool.Result{Content: "rested"}, nil
		}
		select {
		case <-time.After(25 * time.Millisecond):
		case <-ctx.Done():
			return tool.Result{}, ctx.Err()
		}
	}
}

// runSoakWorker is a worker process of the soak.
func runSoakWorker(t *testing.T, spec string) {
	var sw soakWorker
	if err := json.Unmarshal([]byte(spec), &sw); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(sw.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	r := rand.New(rand.NewPCG(sw.Seed, uint64(sw.CrashAt)))
	var fresh atomic.Int64
	prefix := strconv.Itoa(os.Getpid())
	ids := policyIDModes[sw.Mode].id
	p := &soakProc{plan: newSoakPlan(sw.Seed), crashAt: sw.CrashAt, logPath: sw.Log, logf: logf,
		id: func(i int) string {
			if sw.Mode == 0 { // afresh: across processes too
				return fmt.Sprintf("call_%s_%d", prefix, fresh.Add(1))
			}
			return ids(0, i)
		}}
	p.killGate = newKillGate(time.Duration(r.IntN(20_000))*time.Microsecond, p.log)
	effect := func(name string, log func(arg string)) tool.Tool {
		return tool.Func{Def: tool.Definition{Name: name, Description: "A side effect.", Parameters: json.RawMessage(`{"type":"object"}`)},
			Fn: func(_ context.Context, c tool.Call) (tool.Result, error) {
				var a struct{ Text, What string }
				if err := json.Unmarshal(c.Arguments, &a); err != nil {
					return tool.Result{}, err
				}
				p.point("t")
				mark := p.pass("e")
				log(a.Text + a.What)
				return tool.Result{Content: fmt.Sprintf("%sed %s %s", strings.TrimSuffix(name, "e"), a.Text+a.What, mark)}, nil
			}}
	}
	record := effect("record", func(text string) { p.log("record %s", text) })
	publish := tool.RequireApproval(effect("publish", func(what string) { p.log("effect publish %s", what) }), "", 0)
	deploy := tool.RequireApproval(effect("deploy", func(what string) { p.log("effect deploy %s", what) }), "", 0)
	nap := tool.Func{Def: tool.Definition{Name: "nap", Description: "Waits a little.", Parameters: json.RawMessage(`{"type":"object"}`)}, Fn: p.nap}
	reg, err := tool.NewRegistry(record, nap, publish, deploy)
	if err != nil {
		t.Fatal(err)
	}
	c := p.dial(t)
	defer c.Close()
	// A killed worker's sticky tasks go to the next one after a second.
	w := worker.New(c, sw.Queue, worker.Options{StickyScheduleToStartTimeout: time.Second})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": provider.Func(p.model)}, Tools: reg})
	if err := w.Run(worker.InterruptCh()); err != nil {
		t.Fatal(err)
	}
}
