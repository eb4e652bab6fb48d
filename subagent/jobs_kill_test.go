//go:build unix

package subagent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

var (
	jobSoakRuns  = flag.Int("job-soak-runs", 0, "how many seeds TestBackgroundSoakSurvivesSIGKILL runs in each id mode (0: one seed, in one id mode drawn from it)")
	jobSoakKills = flag.Int("job-soak-kills", 3, "how many times TestBackgroundSoakSurvivesSIGKILL kills the process of each schedule")
)

// The soak's shape: a lead starts jobSoakChildren children in the
// background, sends them jobSoakMessages messages each, in a random order
// and in steps of up to four sends that may name one child more than once,
// while jobSoakPublishers of the children end with a call a person must
// approve; the lead collects them all, then makes a call a person must
// approve too. jobSoakTokens is the lead's token limit. jobSoakDiggers
// of the children, once done, dig on, each dig's result adding about a
// thousand tokens to what each of their later calls reads, until their
// token limit, jobSoakJobTokens (JobLimits.Tokens), asks them to wrap up;
// the others end far below it. What a job spends can pass its limit by
// what the estimate of its calls fell short, at most jobSoakSlack here
// (WithTokenLimit).
const (
	jobSoakChildren   = 8
	jobSoakMessages   = 3
	jobSoakPublishers = 3
	jobSoakDiggers    = 2
	jobSoakTokens     = 2_000_000
	jobSoakJobTokens  = 60_000
	jobSoakSlack      = 2_000
)

// jobSoakRound is what the parent tells the process that runs one round
// of the soak's turn, and what that process reports back.
type jobSoakRound struct {
	Seed    uint64            `json:"seed"`
	Mode    int               `json:"mode"`    // a resumetest id mode
	CrashAt int64             `json:"crashAt"` // the model call at which the process is killed (0: none)
	Store   string            `json:"store"`
	Log     string            `json:"log"`
	Pending *tool.Interrupted `json:"pending,omitempty"`
	Answers []tool.Answer     `json:"answers,omitempty"`

	// Reported by the round.
	Answer      string            `json:"answer,omitempty"`
	Err         string            `json:"err,omitempty"`
	Interrupted *tool.Interrupted `json:"interrupted,omitempty"`
	Usage       provider.Usage    `json:"usage"`
	Earlier     provider.Usage    `json:"earlier"`
	Calls       int64             `json:"calls"`          // model calls the round's process made
	Left        []string          `json:"left,omitempty"` // store keys left once the turn's journal is deleted
}

const jobSoakEnv = "DEPUTY_TEST_JOB_SOAK_ROUND"

// TestBackgroundSoakSurvivesSIGKILL: a lead starts 8 background children
// and sends them 24 messages in random order, several to one child in one
// step at times; three children, and then the lead, make a call a person
// approves or declines; two children, once done, dig on until their token
// limit (JobLimits.Tokens) asks them to wrap up. The turn runs in a
// process of its own over a SQLite file, which is killed with SIGKILL
// three times at random model calls and run again from its journal each
// time; the models bill each answer in a log that outlives the processes.
// At the end every child answered once, every message reached its child
// once and in the order the lead sent it, each approved call ran once and
// a declined one never, no model answer was billed twice, what the turn
// reports spent is what the models billed, within its limit, each digger
// and no other child was asked to wrap up, once, no job spent past its
// limit by more than its calls' estimates fell short, and the store keeps
// nothing of the turn once its journal is deleted. It runs with models
// that name their calls afresh, not at all, and from call_0.
//
// go test runs one schedule, in an id mode its seed picks; CI's resume
// phase runs -job-soak-runs seeds in each of the three modes.
//
// The one window a kill is kept out of is the one no journal can close:
// between a model's answer arriving, or a tool's effect, and its record.
// The process stops new answers and effects, waits until every one given
// is recorded, lets the rest of the process run on a few milliseconds, and
// is killed wherever that leaves it.
func TestBackgroundSoakSurvivesSIGKILL(t *testing.T) {
	if spec := os.Getenv(jobSoakEnv); spec != "" {
		runJobSoakRound(t, spec)
		return
	}
	if testing.Short() {
		t.Skip("starts a process per round")
	}
	seed := *scheduleSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	modes := []string{"fresh ids", "no ids", "ids restarting at call_0"}
	start := time.Now()
	var processes, kills int
	runs := *jobSoakRuns
	if runs == 0 {
		runs = 1
	}
	schedules := 0
	for i := range runs {
		for mode, name := range modes {
			s := seed + uint64(i)
			if *jobSoakRuns == 0 && uint64(mode) != s%uint64(len(modes)) {
				continue
			}
			schedules++
			t.Run(fmt.Sprintf("%s, seed %d", name, s), func(t *testing.T) {
				p, k := jobSoak(t, s, mode)
				processes += p
				kills += k
				if t.Failed() {
					t.Logf("rerun it: go test -run 'TestBackgroundSoakSurvivesSIGKILL' ./subagent -schedule-seed %d -job-soak-runs 1", s)
				}
			})
		}
	}
	t.Logf("%d schedules from seed %d over %d processes, %d of them killed, in %v", schedules, seed, processes, kills, time.Since(start).Round(time.Millisecond))
}

// jobSoak runs the soak of seed in id mode to its end and checks it; it
// returns how many processes ran and how many were killed.
func jobSoak(t *testing.T, seed uint64, mode int) (processes, kills int) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(seed, 0x50a4))
	plan := newJobSoakPlan(seed)
	round := jobSoakRound{Seed: seed, Mode: mode, Store: filepath.Join(dir, "deputy.db"), Log: filepath.Join(dir, "world.log")}
	asked := map[string]string{}  // question → its interrupt id
	approved := map[string]bool{} // question → the answer
	var last jobSoakRound
	for n := 0; ; n++ {
		if n > 30 {
			t.Fatalf("seed %d: no end after %d rounds", seed, n)
		}
		round.CrashAt = 0
		if left := int64(*jobSoakKills - kills); left > 0 {
			// A random model call among those the turn has yet to make
			// (as far as the plan tells), a share for each kill left, so
			// that the kills are spread over the turn and all come before
			// it ends.
			w := readJobSoakLog(t, round.Log)
			round.CrashAt = 1 + r.Int64N(max(1, (plan.calls()-w.billed.Requests)/left))
		}
		got, killed := startRound[jobSoakRound](t, "TestBackgroundSoakSurvivesSIGKILL", round, filepath.Join(dir, "round.json"), jobSoakEnv, "DEPUTY_TEST_JOB_SOAK_OUT="+filepath.Join(dir, "round.json"))
		processes++
		w := readJobSoakLog(t, round.Log)
		if w.stuck != "" {
			t.Fatalf("seed %d, round %d: %s", seed, n, w.stuck)
		}
		if killed {
			kills++
			continue // the same round again, in a new process
		}
		last = got
		if got.Err != "" {
			t.Fatalf("seed %d, round %d: %s", seed, n, got.Err)
		}
		// Every round reports the whole turn so far: what every process
		// before it billed too.
		if got.Usage != w.billed {
			t.Errorf("seed %d, round %d: the turn reports %+v spent (%+v of it earlier), the models billed %+v", seed, n, got.Usage, got.Earlier, w.billed)
		}
		if got.Interrupted == nil {
			break
		}
		round.Pending, round.Answers = got.Interrupted, nil
		for _, it := range got.Interrupted.Interrupts {
			if id, ok := asked[it.Message]; ok && id != it.ID {
				t.Errorf("seed %d: %q asked again as %s, first as %s", seed, it.Message, it.ID, id)
			}
			if _, ok := approved[it.Message]; ok {
				t.Errorf("seed %d: %q asked again after its answer", seed, it.Message)
			}
			asked[it.Message] = it.ID
			yes := r.IntN(3) > 0
			approved[it.Message] = yes
			round.Answers = append(round.Answers, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(fmt.Sprintf(`{"approved":%v}`, yes))})
		}
	}
	w := readJobSoakLog(t, round.Log)
	fail := func(format string, args ...any) {
		t.Errorf("seed %d: %s", seed, fmt.Sprintf(format, args...))
	}
	if kills != *jobSoakKills {
		fail("%d kills, want %d", kills, *jobSoakKills)
	}
	// Every message once, in the order the lead sent it, to its child.
	for c := range jobSoakChildren {
		child := fmt.Sprint("c", c)
		if got, want := w.recorded[child], plan.order(c); !slices.Equal(got, want) {
			fail("child %s recorded %v, want %v: each message once, in the order sent", child, got, want)
		}
	}
	// Each message numbered by its place among its child's, by every
	// receipt of every run.
	for s := range w.seqs {
		var c, m, seq int
		if _, err := fmt.Sscanf(s, "c%d-m%d %d", &c, &m, &seq); err != nil || seq != m+1 {
			fail("a receipt numbered message c%d-m%d %d, want %d", c, m, seq, m+1)
		}
	}
	if len(w.seqs) < jobSoakChildren*jobSoakMessages {
		fail("the lead read %d receipts, want %d or more", len(w.seqs), jobSoakChildren*jobSoakMessages)
	}
	// Each approved call once, a declined one never.
	want := map[string]int{}
	for q, yes := range approved {
		if yes {
			want[strings.Fields(q)[1]+" "+approvedSubject(q)]++
		}
	}
	for c := range jobSoakChildren {
		if plan.publishes(c) {
			if _, ok := asked[publishQuestion(c)]; !ok {
				fail("child c%d was to ask to publish; it never did", c)
			}
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
	for c := range jobSoakChildren {
		answer := fmt.Sprintf("c%d answers %s", c, strings.Join(plan.order(c), ","))
		if n := strings.Count(last.Answer, answer); n != 1 {
			fail("the lead's answer holds %q %d times, want once: %q", answer, n, last.Answer)
		}
	}
	if !strings.HasPrefix(last.Answer, "all done") {
		fail("the lead's answer %q", last.Answer)
	}
	// The diggers, and only they, reach their limit and wrap up, once;
	// no job spends past its limit by more than the estimate's shortfall.
	for c := range jobSoakChildren {
		child := fmt.Sprint("c", c)
		if want := map[bool]int{true: 1}[plan.digs(c)]; w.wrapped[child] != want {
			fail("child %s was asked to wrap up %d times, want %d (a digger: %v)", child, w.wrapped[child], want, plan.digs(c))
		}
		if w.spent[child] > jobSoakJobTokens+jobSoakSlack {
			fail("child %s spent %d tokens, past its limit of %d by more than %d", child, w.spent[child], jobSoakJobTokens, jobSoakSlack)
		}
	}
	if last.Usage.Tokens() > jobSoakTokens {
		fail("the turn spent %d tokens, past its limit of %d", last.Usage.Tokens(), jobSoakTokens)
	}
	if len(last.Left) > 0 {
		fail("the store keeps %v once the turn ended and its journal was deleted", last.Left)
	}
	t.Logf("seed %d: %d processes, %d killed (at %v), %d model answers billed, %d tokens (by agent %v), %d questions", seed, processes, kills, w.kills, w.billed.Requests, w.billed.Tokens(), w.spent, len(asked))
	return processes, kills
}

// jobSoakPlan is the order of the lead's sends, and which children ask
// to publish.
type jobSoakPlan struct {
	steps      [][]string // the sends of each step, "c3-m1" for child 3's second message
	publishers []int
	diggers    []int
}

func newJobSoakPlan(seed uint64) jobSoakPlan {
	r := rand.New(rand.NewPCG(seed, 0x91a2))
	var all []int // a child per message
	for c := range jobSoakChildren {
		for range jobSoakMessages {
			all = append(all, c)
		}
	}
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	next := make([]int, jobSoakChildren)
	var p jobSoakPlan
	for len(all) > 0 {
		n := min(len(all), 1+r.IntN(4))
		var step []string
		for _, c := range all[:n] {
			step = append(step, fmt.Sprintf("c%d-m%d", c, next[c]))
			next[c]++
		}
		all = all[n:]
		p.steps = append(p.steps, step)
	}
	p.publishers = r.Perm(jobSoakChildren)[:jobSoakPublishers]
	p.diggers = r.Perm(jobSoakChildren)[:jobSoakDiggers]
	return p
}

// calls is about how many model calls the turn makes: the lead's (start,
// a step per batch of sends, a wait, a wait again for each question, the
// deploy, the answer) and the children's (a record per message, the
// publishers' publish, an answer), without the naps.
func (p jobSoakPlan) calls() int64 {
	lead := 1 + len(p.steps) + 1 + len(p.publishers) + 2
	children := jobSoakChildren*(jobSoakMessages+1) + len(p.publishers)
	return int64(lead + children)
}

// message is the plan's k-th message, in the order the lead sends them.
func (p jobSoakPlan) message(k int) string {
	for _, step := range p.steps {
		if k < len(step) {
			return step[k]
		}
		k -= len(step)
	}
	return ""
}

// order is the messages of child c in the order the lead sends them.
func (p jobSoakPlan) order(c int) []string {
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

func (p jobSoakPlan) publishes(c int) bool { return slices.Contains(p.publishers, c) }

func (p jobSoakPlan) digs(c int) bool { return slices.Contains(p.diggers, c) }

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

// jobSoakWorld is what the log of the soak's processes says happened.
type jobSoakWorld struct {
	billed   provider.Usage
	spent    map[string]int64    // tokens billed, by agent ("lead", "c3")
	wrapped  map[string]int      // children asked to wrap up, and how often
	paid     map[string]int      // model answers billed, by agent and step
	recorded map[string][]string // by child: the messages it recorded, in order
	effects  map[string]int      // approved calls made: "publish c3", "deploy all"
	seqs     map[string]bool     // "c3-m1 2": a message and a number a receipt gave it
	kills    []string
	stuck    string
}

func readJobSoakLog(t *testing.T, path string) jobSoakWorld {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	w := jobSoakWorld{spent: map[string]int64{}, wrapped: map[string]int{}, paid: map[string]int{}, recorded: map[string][]string{}, effects: map[string]int{}, seqs: map[string]bool{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "bill": // bill <agent/step> <input tokens> <output tokens>
			in, _ := strconv.ParseInt(f[2], 10, 64)
			out, _ := strconv.ParseInt(f[3], 10, 64)
			w.billed = w.billed.Add(provider.Usage{InputTokens: in, OutputTokens: out, Requests: 1})
			w.paid[f[1]]++
			w.spent[f[1][:strings.Index(f[1], "/")]] += in + out
		case "wrapup": // wrapup <child>
			w.wrapped[f[1]]++
		case "record": // record <message>
			child := f[1][:strings.Index(f[1], "-")]
			w.recorded[child] = append(w.recorded[child], f[1])
		case "seq": // seq <message> <its number in the lead's receipt>
			w.seqs[f[1]+" "+f[2]] = true
		case "effect": // effect <tool> <subject>
			w.effects[f[1]+" "+f[2]]++
		case "kill": // kill <model call>
			w.kills = append(w.kills, f[1])
		case "stuck:":
			w.stuck = sc.Text()
		}
	}
	return w
}

// jobSoakProc is the world inside one round's process: its models and
// tools, the log they write, and the gate that keeps a kill out of the
// window between an answer or an effect and its record.
type jobSoakProc struct {
	plan    jobSoakPlan
	mode    int
	prefix  string // of fresh call ids: the process's own
	crashAt int64
	calls   atomic.Int64
	fresh   atomic.Int64
	logMu   sync.Mutex
	logf    *os.File
	jitter  time.Duration

	mu      sync.Mutex
	closed  bool            // no new answer or effect: the process is about to be killed
	opened  chan struct{}   // never closed: what a call stopped at the gate waits on
	pending map[string]bool // marks of answers and effects not yet recorded
	marks   int
}

var jobSoakMark = regexp.MustCompile(`~[ae]\d+~`)

func (p *jobSoakProc) log(format string, args ...any) {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	_, _ = fmt.Fprintf(p.logf, format+"\n", args...)
}

// pass lets an answer or an effect (kind a or e) through the gate and
// returns its mark, which its record will hold; once the process is to
// be killed, it waits for the kill.
func (p *jobSoakProc) pass(kind string) string {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.opened
	}
	p.marks++
	mark := fmt.Sprintf("~%s%d~", kind, p.marks)
	p.pending[mark] = true
	p.mu.Unlock()
	return mark
}

// recorded clears the marks in what the store wrote.
func (p *jobSoakProc) recorded(writes []store.Write) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range writes {
		for _, m := range jobSoakMark.FindAll(w.Value, -1) {
			delete(p.pending, string(m))
		}
	}
}

// crash closes the gate, waits until every answer and effect let through
// is recorded, lets the process run on a little, and kills it.
func (p *jobSoakProc) crash(at int64) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		p.mu.Lock()
		var left []string
		for m := range p.pending {
			left = append(left, m)
		}
		p.mu.Unlock()
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			p.log("stuck: %v were let through 30 s ago and are not recorded yet", left)
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(p.jitter)
	p.log("kill %d", at)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// markingBackend tells the process what the store wrote.
type markingBackend struct {
	store.Backend
	p *jobSoakProc
}

func (b markingBackend) Put(ctx context.Context, writes ...store.Write) error {
	err := b.Backend.Put(ctx, writes...)
	if err == nil {
		b.p.recorded(writes)
	}
	return err
}

var (
	jobSoakChild   = regexp.MustCompile(`child (c\d+)`)
	jobSoakInbound = regexp.MustCompile(`from the agent that started you:\n(c\d+-m\d+)`)
)

func (p *jobSoakProc) model(ctx context.Context, req provider.Request) (provider.Response, error) {
	if n := p.calls.Add(1); n == p.crashAt {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		go p.crash(n)
	}
	mark := p.pass("a")
	steps := 0
	for _, m := range req.Messages {
		if m.Role == provider.RoleAssistant {
			steps++
		}
	}
	var msg provider.Message
	who := "lead"
	if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
		who = jobSoakChild.FindStringSubmatch(firstUser(req))[1]
		msg = p.child(req, who)
		if len(req.Tools) == 0 {
			p.log("wrapup %s", who)
		}
	} else {
		msg = p.lead(req)
	}
	msg.Content = strings.TrimSpace(msg.Content + " " + mark)
	for i := range msg.ToolCalls {
		switch p.mode {
		case 0:
			msg.ToolCalls[i].ID = fmt.Sprint("call_", p.prefix, p.fresh.Add(1))
		case 1:
			msg.ToolCalls[i].ID = ""
		case 2:
			msg.ToolCalls[i].ID = fmt.Sprint("call_", i)
		}
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

func soakCall(name, args string) provider.ToolCall {
	return provider.ToolCall{Name: name, Arguments: json.RawMessage(args)}
}

// lead starts the children, sends the plan's messages a step at a time,
// waits until it has collected every child, asks to deploy, and answers
// with what the children answered.
func (p *jobSoakProc) lead(req provider.Request) provider.Message {
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
			// number, which each run of the turn must give alike.
			if text := p.plan.message(sent); text != "" {
				p.log("seq %s %v", text, v["seq"])
			}
			sent++
		case v["job_id"] != nil && v["status"] == "running":
			jobs = append(jobs, v["job_id"].(string))
		case strings.Contains(m.Content, "deploy"):
			deployed = true
		default:
			answers = append(answers, regexp.MustCompile(`c\d+ answers [c\d,m-]+`).FindAllString(m.Content, -1)...)
		}
	}
	switch {
	case len(jobs) == 0:
		var calls []provider.ToolCall
		for c := range jobSoakChildren {
			calls = append(calls, soakCall(subagent.SpawnToolName, fmt.Sprintf(`{"task":"child c%d","background":true}`, c)))
		}
		return provider.AssistantMessage("starting", calls...)
	case sent < jobSoakChildren*jobSoakMessages:
		k := 0
		for _, step := range p.plan.steps {
			if k == sent {
				var calls []provider.ToolCall
				for _, text := range step {
					c, _ := strconv.Atoi(text[1:strings.Index(text, "-")])
					calls = append(calls, soakCall(subagent.JobsToolName, fmt.Sprintf(`{"action":"send","job_id":%q,"message":%q}`, jobs[c], text)))
				}
				return provider.AssistantMessage("sending", calls...)
			}
			k += len(step)
		}
		return provider.AssistantMessage("lost count of the sends: " + strconv.Itoa(sent))
	case len(answers) < jobSoakChildren:
		return provider.AssistantMessage("waiting", soakCall(subagent.JobsToolName, `{"action":"wait","timeout_seconds":600}`))
	case !deployed:
		return provider.AssistantMessage("deploying", soakCall("deploy", `{"what":"all"}`))
	}
	slices.Sort(answers)
	return provider.AssistantMessage("all done: " + strings.Join(answers, "; "))
}

// child records each message it received, one a step, in order, naps
// while it waits for more, asks to publish if it is one of the plan's
// publishers, and answers with its messages.
func (p *jobSoakProc) child(req provider.Request, who string) provider.Message {
	var got, recorded []string
	published := false
	for _, m := range req.Messages {
		switch m.Role {
		case provider.RoleUser:
			for _, sm := range jobSoakInbound.FindAllStringSubmatch(m.Content, -1) {
				got = append(got, sm[1])
			}
		case provider.RoleTool:
			switch {
			case strings.HasPrefix(m.Content, "recorded "):
				recorded = append(recorded, strings.Fields(m.Content)[1])
			case strings.Contains(m.Content, "publish"):
				published = true
			}
		}
	}
	c, _ := strconv.Atoi(who[1:])
	switch {
	case len(req.Tools) == 0: // asked to wrap up, at its token limit
		return provider.AssistantMessage(fmt.Sprintf("%s answers %s cut short", who, strings.Join(recorded, ",")))
	case len(recorded) < len(got):
		return provider.AssistantMessage("", soakCall("record", fmt.Sprintf(`{"text":%q}`, got[len(recorded)])))
	case len(recorded) < jobSoakMessages:
		return provider.AssistantMessage("", soakCall("nap", `{}`))
	case p.plan.publishes(c) && !published:
		return provider.AssistantMessage("", soakCall("publish", fmt.Sprintf(`{"what":%q}`, who)))
	case p.plan.digs(c):
		return provider.AssistantMessage("", soakCall("dig", `{}`))
	}
	return provider.AssistantMessage(fmt.Sprintf("%s answers %s", who, strings.Join(recorded, ",")))
}

// runJobSoakRound is the process that runs one round.
func runJobSoakRound(t *testing.T, spec string) {
	var round jobSoakRound
	if err := json.Unmarshal([]byte(spec), &round); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(round.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	r := rand.New(rand.NewPCG(round.Seed, uint64(round.CrashAt)))
	p := &jobSoakProc{plan: newJobSoakPlan(round.Seed), mode: round.Mode, prefix: strconv.Itoa(os.Getpid()) + "_",
		crashAt: round.CrashAt, logf: logf, jitter: time.Duration(r.IntN(20_000)) * time.Microsecond,
		opened: make(chan struct{}), pending: map[string]bool{}}

	effect := func(name string, log func(arg string)) tool.Tool {
		return tool.Func{Def: tool.Definition{Name: name, Description: "A side effect.", Parameters: json.RawMessage(`{"type":"object"}`)},
			Fn: func(_ context.Context, c tool.Call) (tool.Result, error) {
				var a struct{ Text, What string }
				if err := json.Unmarshal(c.Arguments, &a); err != nil {
					return tool.Result{}, err
				}
				mark := p.pass("e")
				log(a.Text + a.What)
				return tool.Result{Content: fmt.Sprintf("%sed %s %s", strings.TrimSuffix(name, "e"), a.Text+a.What, mark)}, nil
			}}
	}
	record := effect("record", func(text string) { p.log("record %s", text) })
	publish := tool.RequireApproval(effect("publish", func(what string) { p.log("effect publish %s", what) }), "", 0)
	deploy := tool.RequireApproval(effect("deploy", func(what string) { p.log("effect deploy %s", what) }), "", 0)
	nap := tool.Func{Def: tool.Definition{Name: "nap", Description: "Waits a little.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			select {
			case <-time.After(25 * time.Millisecond):
			case <-ctx.Done():
				return tool.Result{}, ctx.Err()
			}
			return tool.Result{Content: "rested"}, nil
		}}
	dig := tool.Func{Def: tool.Definition{Name: "dig", Description: "Digs on.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) {
			return tool.Result{Content: "found " + strings.Repeat("ore ", 1000)}, nil
		}}
	model := provider.Func(p.model)
	childTools, err := tool.NewRegistry(record, nap, publish, dig)
	if err != nil {
		t.Fatal(err)
	}
	s, err := subagent.NewSpawner(model, childTools, subagent.WithBackground(), subagent.WithJobLimits(subagent.JobLimits{Steps: 1000, Tokens: jobSoakJobTokens}))
	if err != nil {
		t.Fatal(err)
	}
	leadTools, err := tool.NewRegistry(s, s.JobsTool(), deploy)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sqlite.Open(round.Store)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(markingBackend{b, p}, store.WithLeaseTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	j, err := st.Journal(ctx, "soak-turn")
	if err != nil {
		t.Fatal(err)
	}
	if round.Pending != nil {
		if ctx, err = tool.Resume(ctx, round.Pending, round.Answers...); err != nil {
			t.Fatal(err)
		}
	}
	lead := lead(t, model, leadTools, agent.WithMaxSteps(100), agent.WithTokenLimit(jobSoakTokens))
	out, err := lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
	report := jobSoakRound{Answer: out.Answer, Usage: out.TotalUsage(), Earlier: out.Earlier, Calls: p.calls.Load()}
	var in *tool.Interrupted
	switch {
	case errors.As(err, &in):
		report.Interrupted = in
	case err != nil:
		report.Err = err.Error()
	default:
		// The turn ended: its journal goes, and nothing else of it may
		// stay behind.
		if err := st.DeleteJournal(ctx, "soak-turn"); err != nil {
			t.Fatal(err)
		}
		items, err := b.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			report.Left = append(report.Left, it.Key)
		}
	}
	data, _ := json.Marshal(report)
	if err := os.WriteFile(os.Getenv("DEPUTY_TEST_JOB_SOAK_OUT"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}
