// Package run is what one run of an agent shares, through its context,
// with the tools it calls and the sub-agents they start: the run's identity
// (its id, its parent's id, its agent's name, its depth in a delegation
// tree) and its scope (values kept for the run's length, work to finish
// when it ends, its token budget and the parts of it set aside).
//
// Users read the identity through the agent package (agent.RunID,
// agent.ParentRunID, agent.Name, agent.Depth). The rest is the plumbing
// between the agent loop, which starts and finishes runs, and the
// sub-agent tools, which nest runs and share their budget.
package run

import (
	"context"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/usage"
	"github.com/deputy-go/deputy/provider"
	"go.opentelemetry.io/otel/trace"
)

type key struct{}

// info is what a context carries of its run: the run itself (its scope,
// which holds what stays the same for the whole run: its id, name and
// place) and what changes from context to context within it. It is copied
// into each layer a With function adds, so it holds nothing else.
type info struct {
	// depth is the run's depth in its tree; given is ForRun's (below),
	// beside it so that the two take one word: a word more in info, which
	// each scope holds, takes the scope from 480 bytes to the 512-byte
	// size class.
	depth int32
	given bool
	scope *scope // nil outside a run
	// bound is the policy that binds the context and the runs under it
	// (Bound), nil when none does.
	bound *Bound
	// shares is the part of the run's token budget set aside for the
	// sub-agents of the current step's tool calls (Step.Share), nil when
	// none is; budget is the token limit the next run started under the
	// context gets from the tool that starts it (ForRun), -1 when not
	// set.
	shares *Shares
	budget int64
	// costShare is the cost limit, in US dollars, of a run started under
	// the context by a tool call of a step (Step.Share); 0 for none.
	// hold, when not nil, is where that share is held in the run that gave
	// it, for work that outlives its call (HoldCostShare). given (above):
	// the next run's budget is the one a tool gave it (ForRun), not one
	// to take from the call's share (Start).
	costShare float64
	hold      *costHold
	// tally counts what AddEarlier records under the context, the runs
	// started under it included (ForRun); nil when nothing counts.
	tally *Counter
	// spend is the record of work that outlives the run that started it,
	// which the context and the runs started under it spend (TrackSpend);
	// nil when none keeps one.
	spend *Spend
	// step is the step whose tool calls run under the context (AtStep),
	// nil outside one, and call the call of that step the context is in
	// (AtCall), nil outside one.
	step *stepCalls
	call *callAt
}

// callAt is the tool call of a step a context is in (AtCall): its id,
// what the model calls made under it have spent (AddSpent), and the share
// of the step's budget the runs started under it draw on (pot), made when
// the first of them takes it.
type callAt struct {
	id    string
	mu    sync.Mutex
	spent provider.Usage
	pot   *callPot
}

// callPot is the share of its step's budget (Step.Share) a tool call's
// runs draw on, however many the call starts: each takes what the ones
// before it left (TakeShare, TakeCostShare), and gives back, when it
// ends, what it neither spent nor needs for its answer to be read. Its
// fields change under the call's mu.
type callPot struct {
	// tokens is what of the token share no run holds or spent; held, the
	// part of the share still reserved in the step's run (Shares.held).
	tokens, held int64
	// dollars is what of the cost share no run holds or spent, once
	// costSet.
	dollars float64
	costSet bool
	// claimed: the pot took its share of the step's tokens (or found none
	// left).
	claimed bool
}

// callLayer is AtCall's context layer and its call, in one allocation.
type callLayer struct {
	info
	at callAt
}

// stepCalls is one step of a run whose tool calls are running: its number,
// its calls, in the order the model gave them, and the request whose reply
// asked for them (Step.Prefix).
type stepCalls struct {
	n      int
	calls  []provider.ToolCall
	prefix *provider.Request
	asked  *Asked // Step.Asked
	price  provider.Price
}

// A Counter counts what AddEarlier recorded under a context (ForRun), and
// adds it to the counter it is inside.
type Counter struct {
	up      *Counter
	mu      sync.Mutex
	earlier provider.Usage
	cost    float64
}

// Counted returns what AddEarlier recorded under the context of c, in the
// runs started under it too, and what that cost.
func (c *Counter) Counted() (provider.Usage, float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.earlier, c.cost
}

// nextRun is the context layer of ForRun and its counter, in one
// allocation.
type nextRun struct {
	info
	counter Counter
}

// ForRun returns ctx for the next run a sub-agent tool starts under it
// (Start), in one context layer, and the Counter of what AddEarlier records
// under it, in the runs started under it too. A sub-agent tool counts so
// what the agent it runs recorded as spent before a resume: an agent that
// reports an Earlier part in its Output it did not record (one that is not
// a React, such as a remote agent) has the rest recorded for it.
//
// When tokens is not negative, the next run may use at most tokens tokens,
// however much its agent's own limit allows: the tool gives the child it
// starts the tokens it set aside for it. When dollars is positive, the next
// run may spend at most dollars: a call that starts more than one run (a
// corrective retry) gives each what the ones before it left of the call's
// share (a share used up is passed as a tiny positive amount, not 0, so
// that the run stays bounded). The runs the next run starts do not inherit
// either; they are bounded by their parent's limits.
func ForRun(ctx context.Context, tokens int64, dollars float64) (context.Context, *Counter) {
	nr := &nextRun{info: from(ctx)}
	nr.given = true
	if tokens >= 0 {
		nr.budget = tokens
	}
	if dollars > 0 {
		nr.costShare = dollars
	}
	nr.counter.up = nr.tally
	nr.tally = &nr.counter
	return context.WithValue(ctx, key{}, &nr.info), &nr.counter
}

func from(ctx context.Context) info {
	if ri, ok := ctx.Value(key{}).(*info); ok {
		return *ri
	}
	return info{budget: -1}
}

// scopeOf returns the scope of the run ctx belongs to, or nil outside a
// run.
func scopeOf(ctx context.Context) *scope {
	if ri, ok := ctx.Value(key{}).(*info); ok {
		return ri.scope
	}
	return nil
}

// ID returns the id of the run ctx belongs to, or "" outside a run.
func ID(ctx context.Context) string {
	if sc := scopeOf(ctx); sc != nil {
		return sc.id
	}
	return ""
}

// Parent returns the id of the run that started the run of ctx, or "".
func Parent(ctx context.Context) string {
	if sc := scopeOf(ctx); sc != nil && sc.up != nil {
		return sc.up.id
	}
	return ""
}

// Name returns the name of the agent whose run ctx belongs to, or "".
func Name(ctx context.Context) string {
	if sc := scopeOf(ctx); sc != nil {
		return sc.name
	}
	return ""
}

// Path returns the names of the agents whose runs ctx is inside, from the
// top-level run down to its own, joined by "/" ("lead/researcher"), or ""
// outside a run.
func Path(ctx context.Context) string {
	p, _, _, _, _ := Place(ctx)
	return p
}

// Place returns, in one look-up, where the run of ctx is: its Path,
// Depth and ID, and the Owner and Thread it was started under.
func Place(ctx context.Context) (path string, depth int, id, owner, thread string) {
	ri, _ := ctx.Value(key{}).(*info)
	if ri == nil {
		w := whereOf(ctx)
		return "", 0, "", w.owner, w.thread
	}
	if ri.scope == nil {
		// A place set outside any run (WithDepth, WithPlace), as a worker
		// that runs a tool call of a run elsewhere sets it: only a
		// context outside any run here reads the path of the run
		// elsewhere, as a run started under it keeps its own.
		w := whereOf(ctx)
		return w.elsewhere, int(ri.depth), "", w.owner, w.thread
	}
	pl := ri.scope.place()
	return pl.path, int(ri.depth), ri.scope.id, pl.owner, pl.thread
}

// placed is a run's path, owner and thread, worked out once, on the
// first call of Place, and its place in its tree (pos, Position), worked
// out once, on the first call of Position, under the scope's mu: a run
// that no one asks pays nothing for them, and one that a policy asks
// about each of its calls (Place) nothing for a Position no one reads
// (one allocation and a scan of its parent's step a run). (posDone sits
// in once's padding: the scope stays in the 480-byte size class.)
type placed struct {
	once                     sync.Once
	posDone                  atomic.Bool
	path, owner, thread, pos string
}

func (sc *scope) place() *placed {
	sc.placed.once.Do(func() {
		pl := &sc.placed
		pl.path = sc.name
		w := whereOf(sc.ctx)
		up := w.elsewhere
		if sc.up != nil {
			up = sc.up.place().path
		}
		if up != "" {
			pl.path = childPath(up, sc.name)
		}
		pl.owner, pl.thread = w.owner, w.thread
	})
	return &sc.placed
}

// childPath returns the path of a run of the agent name started under a
// run whose path is up: up + "/" + name. A tree's runs have the same few
// paths, run after run, and a run's path is built for each run a policy
// binds: the paths built are kept in a small table, each in a slot of its
// own by hash (one built again takes the slot of the one before), and
// given again. So a delegation under a policy builds no string for its
// child's path: in BenchmarkDelegationPolicyRatio, the string and its
// allocation were nearly 1% of the CPU of a delegation under five rules.
func childPath(up, name string) string {
	slot := &paths[(maphash.String(pathSeed, up)^maphash.String(pathSeed, name))%uint64(len(paths))]
	if e := slot.Load(); e != nil && e.up == up && e.name == name {
		return e.path
	}
	e := &pathEntry{up: up, name: name, path: up + "/" + name}
	slot.Store(e)
	return e.path
}

// pathEntry is a path childPath built, and what it was built of.
type pathEntry struct{ up, name, path string }

var (
	pathSeed = maphash.MakeSeed()
	paths    [256]atomic.Pointer[pathEntry]
)

// position returns the run's place in its tree (Position).
func (sc *scope) position() string {
	pl := &sc.placed
	if pl.posDone.Load() {
		return pl.pos
	}
	pos := sc.name
	if sc.at != nil {
		pos = sc.at.callPos(sc.name) // the parent's scope, under its own mu
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if !pl.posDone.Load() {
		pl.pos = pos
		pl.posDone.Store(true)
	}
	return pl.pos
}

// where is what a context says of whom it acts for and of the run
// elsewhere it stands in for (WithOwner, WithThread, WithPlace): one
// layer holds all three, each With copying the others from the layer
// before, so that a run's place is found in one look-up (place) where
// three walked the whole context, which seldom holds any of them.
type where struct{ owner, thread, elsewhere string }

type whereKey struct{}

func whereOf(ctx context.Context) where {
	if w, ok := ctx.Value(whereKey{}).(*where); ok {
		return *w
	}
	return where{}
}

// WithThread returns ctx as part of the conversation thread named thread.
func WithThread(ctx context.Context, thread string) context.Context {
	w := whereOf(ctx)
	w.thread = thread
	return context.WithValue(ctx, whereKey{}, &w)
}

// Thread returns the thread ctx is part of (WithThread), or "".
func Thread(ctx context.Context) string { return whereOf(ctx).thread }

// WithOwner returns ctx acting for owner, the caller a served endpoint
// named.
func WithOwner(ctx context.Context, owner string) context.Context {
	w := whereOf(ctx)
	w.owner = owner
	return context.WithValue(ctx, whereKey{}, &w)
}

// Owner returns the owner ctx acts for (WithOwner), or "".
func Owner(ctx context.Context) string { return whereOf(ctx).owner }

// Depth returns how deep in a delegation tree ctx is: 0 for a top-level
// agent, 1 for its sub-agents, and so on.
func Depth(ctx context.Context) int { return int(from(ctx).depth) }

// WithDepth returns a context at the given delegation depth, in the same
// run. Sub-agent tools call it with Depth(ctx)+1 before running a child; a
// worker that runs a tool call for a run elsewhere calls it with the
// call's depth.
func WithDepth(ctx context.Context, depth int) context.Context {
	ri := from(ctx)
	ri.depth = int32(depth)
	return context.WithValue(ctx, key{}, &ri)
}

// WithPlace returns ctx at the given delegation depth and standing for a
// run elsewhere whose path is path ("lead/researcher"), as a worker that
// runs one of that run's calls sets it: Place reports path, and a run
// started under ctx is path's child ("lead/researcher/critic").
func WithPlace(ctx context.Context, path string, depth int) context.Context {
	w := whereOf(ctx)
	w.elsewhere = path
	return WithDepth(context.WithValue(ctx, whereKey{}, &w), depth)
}

// Position returns the place in its tree of the run ctx belongs to: the
// names of the runs that led to it from the top-level run, separated by
// "/", each but the top-level one followed by "@" and the place of the
// tool call that started it in its parent (the parent's step, from 1, a
// ".", and the call's index in that step, from 0), as
// "lead/researcher@1.0/critic@2.3". Inside a tool call that runs no agent
// of its own it ends with the call's place ("lead/@1.0"). It is the same
// every time the same tree runs, whatever the order in which parallel
// calls run, and "" outside a run.
func Position(ctx context.Context) string {
	ri := from(ctx)
	if ri.call == nil || ri.step == nil {
		return ri.pos()
	}
	return ri.callPos("")
}

// CallPlace returns the step of the tool call ctx is in and the call's
// index among that step's calls, as Position numbers them; ok is false
// outside a step's call (AtStep, AtCall, AtCallOf).
func CallPlace(ctx context.Context) (step, index int, ok bool) {
	ri := from(ctx)
	if ri.step == nil || ri.call == nil {
		return 0, 0, false
	}
	i := slices.IndexFunc(ri.step.calls, func(c provider.ToolCall) bool { return c.ID == ri.call.id })
	if i < 0 {
		return 0, 0, false
	}
	return ri.step.n, i, true
}

// CallName returns the name of the tool the step's call ctx is in asked
// for (AtCall), or "" outside a step's call.
func CallName(ctx context.Context) string {
	ri, ok := ctx.Value(key{}).(*info)
	if !ok || ri.step == nil || ri.call == nil {
		return ""
	}
	for _, c := range ri.step.calls {
		if c.ID == ri.call.id {
			return c.Name
		}
	}
	return ""
}

// callPos is the position of a run named name started under the tool
// call ri is in, or under ri's run when it is in none.
func (ri *info) callPos(name string) string {
	at := ""
	if ri.step != nil && ri.call != nil {
		if i := slices.IndexFunc(ri.step.calls, func(c provider.ToolCall) bool { return c.ID == ri.call.id }); i >= 0 {
			at = "@" + strconv.Itoa(ri.step.n) + "." + strconv.Itoa(i)
		}
	}
	pos := ri.pos()
	if pos == "" {
		return name + at
	}
	return pos + "/" + name + at
}

// pos is the place in its tree of the run ri belongs to, "" outside a run.
func (ri *info) pos() string {
	if ri.scope == nil {
		return ""
	}
	return ri.scope.position()
}

// A Step is a step of a run whose tool calls are about to run (AtStep).
type Step struct {
	// N is the step's number, from 1 (0 for the calls a run's input left
	// open), and Calls its calls, in the order the model gave them.
	N     int
	Calls []provider.ToolCall
	// Prefix is the model request whose reply asked for the calls (the
	// conversation as sent, without a note for that call alone), or nil: a
	// context fork started by one of them sends it as the prefix of its
	// own requests (Prefix). It must not change afterwards.
	Prefix *provider.Request
	// Asked is what the run's calls ask, and the model that answered the
	// last of them, when a cost limit bounds the run (nil: none): a run
	// started by one of the calls that asks the same is reserved at that
	// model's price until a reply of its own names one (Answered).
	Asked *Asked
	// Share sets aside, for the sub-agents of the calls, an equal share
	// each of what the run has left, after Keep tokens and KeepCost
	// dollars kept back for what its next model call reads before the
	// calls' results: see TakeShare.
	Share    bool
	Keep     int64
	KeepCost float64
	// Price is the price of the run's own model calls (zero when it has
	// none), at which what the run spends to look after work that
	// outlives a call is taken from that work's cost share
	// (HoldCostShare).
	Price provider.Price
}

// stepLayer is AtStep's context layer, with the step and the shares it
// sets aside: one allocation for the three.
type stepLayer struct {
	info
	step   stepCalls
	shares Shares
}

// AtStep returns ctx under which the tool calls of st run, and the shares
// it set aside (st.Share), which the caller gives back with Release once
// the calls have ended (nil when none). The agent loop calls it before it
// runs a step's calls, and the Registry marks each call's context with
// AtCall, so that a run started under a call knows its place in the tree
// (Position).
func AtStep(ctx context.Context, st Step) (context.Context, *Shares) {
	l := &stepLayer{info: from(ctx)}
	l.step = stepCalls{n: st.N, calls: st.Calls, prefix: st.Prefix, asked: st.Asked, price: st.Price}
	l.info.step, l.info.call = &l.step, nil
	var sh *Shares
	if st.Share && shareOut(ctx, &l.info, &l.shares, len(st.Calls), st.Keep, st.KeepCost, Floor(st.Calls, RefusalBytes), st.Price) {
		sh = &l.shares
	}
	return context.WithValue(ctx, key{}, &l.info), sh
}

// AtCall returns ctx marked as the context of the tool call id of the
// step of ctx (AtStep), which counts what the model calls made under it
// spend (AddSpent, AtLeastSpent); outside a step it returns ctx.
func AtCall(ctx context.Context, id string) context.Context {
	ri, ok := ctx.Value(key{}).(*info)
	if !ok || ri.step == nil {
		return ctx
	}
	l := &callLayer{info: *ri}
	l.at.id = id
	l.info.call = &l.at
	return context.WithValue(ctx, key{}, &l.info)
}

// AddSpent adds u, what a model call made under ctx spent (or what an
// earlier run of a journaled turn spent there, replayed), to what the tool
// call ctx is in has spent, and each tool call the run of ctx is inside:
// the ledger (internal/ledger) calls it for every call it counts.
//
// It adds u to what each run it is made under that tallies its spending
// (TrackSpent) has spent so far, up to one that has reported its cost.
func AddSpent(ctx context.Context, u provider.Usage) {
	ri, ok := ctx.Value(key{}).(*info)
	if !ok {
		return
	}
	ri.call.add(u)
	for sc := ri.scope; sc != nil; sc = sc.up {
		if sc.at != nil {
			sc.at.call.add(u)
		}
		if sc.flags.Load()&flagTallied != 0 {
			sc.mu.Lock()
			if !sc.closed {
				sc.rare.tally = sc.rare.tally.Add(u)
			}
			sc.mu.Unlock()
		}
	}
}

// The bits of scope.flags.
const (
	flagDenied  = 1 << iota // denials holds one
	flagTallied             // the run tallies what it spends
)

// TrackSpent makes the run of ctx tally what the model calls made under
// it spend from now on, for Spent: a run that reports its progress as it
// goes (a background child's) calls it as it starts.
func TrackSpent(ctx context.Context) {
	sc := from(ctx).scope
	if sc == nil {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.rareOf() // where it tallies
	sc.flags.Or(flagTallied)
}

func (c *callAt) add(u provider.Usage) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.spent = c.spent.Add(u)
	c.mu.Unlock()
}

// AtLeastSpent returns reported, what the tool call ctx is in (AtCall)
// reported it spent (tool.Result.Usage), raised, count by count, to what
// the model calls made under it have spent so far (AddSpent), in the runs
// it started and theirs: a tool that runs sub-agents itself and reports
// none of it is counted all the same, and one that reports it is not
// counted twice. Outside a call it returns reported.
func AtLeastSpent(ctx context.Context, reported provider.Usage) provider.Usage {
	ri, ok := ctx.Value(key{}).(*info)
	if !ok || ri.call == nil {
		return reported
	}
	c := ri.call
	c.mu.Lock()
	s := c.spent
	c.mu.Unlock()
	return usage.Most(reported, s)
}

// AtCallOf returns dst at the depth of ctx and marked as in the tool call
// ctx is in (AtStep, AtCall), so that a run started under dst — work that
// outlives the call, such as a background job, under its run's Context —
// has the call's depth and place in the tree (Position), as a child
// started during the call has. dst must be in the same run as ctx (or
// both outside any run); otherwise, or where nothing changes, it returns
// dst. Both are set in one context layer: a background job's context has
// one layer fewer than with a WithDepth of its own.
func AtCallOf(ctx, dst context.Context) context.Context {
	src := from(ctx)
	c := from(dst)
	if c.scope != src.scope {
		return dst
	}
	mark := src.step != nil && src.call != nil && c.scope != nil
	if !mark && c.depth == src.depth {
		return dst
	}
	if !mark {
		c.depth = src.depth
		return context.WithValue(dst, key{}, &c)
	}
	// The call's place, not its count: what the work spends is its own,
	// not the call's (AddSpent).
	l := &callLayer{info: c}
	l.at.id = src.call.id
	l.step, l.call, l.depth = src.step, &l.at, src.depth
	return context.WithValue(dst, key{}, &l.info)
}

// Start returns a context for a new run with the given id and agent name,
// whose parent is the run of ctx, at the depth of ctx. The run may use
// tokenLimit tokens, its children's included; 0 means no limit. An agent
// calls Start at the start of its run and Finish at its end.
//
// A budget given with ForRun by the tool that starts the run bounds it
// too: the run's limit is the lower of the two.
func Start(ctx context.Context, id, name string, tokenLimit int64) context.Context {
	parent := from(ctx)
	if b := parent.budget; b >= 0 && (tokenLimit == 0 || b < tokenLimit) {
		tokenLimit = max(b, 1) // a limit of 0 would be none: 1 token leaves the run one reply
	}
	costShare := parent.costShare
	var drew *drawn
	if !parent.given && parent.call != nil && (parent.shares != nil || costShare > 0) {
		// Started by the user's own tool under a call of a step that
		// shared out its budget (agent.Run inside a tool, not through a
		// sub-agent tool): it draws on what the call's share has left, as
		// a sub-agent tool's child does, and gives back the rest when it
		// ends (Settle).
		drew = &drawn{}
		if granted, ok, g := TakeShare(ctx, 0, false); ok {
			drew.tokens = g
			if tokenLimit == 0 || granted < tokenLimit {
				tokenLimit = max(granted, 1)
			}
		}
		if costShare > 0 {
			costShare, drew.cost = TakeCostShare(ctx, false)
		}
	}
	sc := &scope{limit: tokenLimit, up: parent.scope}
	if parent.scope != nil {
		sc.prices = parent.scope.prices
	} else {
		sc.prices = pricesElsewhere(ctx)
	}
	// A run given part of its parent's budget hands its answer back to
	// a parent that reads it again, on that budget too (ReadBack).
	sc.readBack = parent.budget >= 0 || parent.shares != nil || parent.costShare > 0
	if costShare > 0 {
		// Its share of what its parent's step had left to spend is its
		// own limit: its siblings' spending does not eat into it.
		sc.costLimit, sc.costShared = costShare, true
		sc.hold = parent.hold
	}
	if drew != nil {
		sc.values = map[any]any{drawnKey{}: drew}
	}
	sc.id, sc.name = id, name
	sc.at, _ = ctx.Value(key{}).(*info)
	sc.info = info{depth: parent.depth, scope: sc, bound: parent.bound, budget: -1, tally: parent.tally, spend: parent.spend}
	run := context.WithValue(ctx, key{}, &sc.info)
	sc.ctx = run
	return run
}

// scope is the state a run shares with the tools it calls: values kept for
// the run's length, work to finish when it ends, and its token budget.
type scope struct {
	ctx    context.Context // the run's own context
	info   info            // what the run's own context carries (in the scope: one allocation for both)
	id     string          // the run's id
	name   string          // the run's agent's name
	placed placed          // see place
	// at is the context layer the run was started under, for its place in
	// its tree (Position), worked out when asked (place): the scan of a
	// step's calls for the index of the one that started the run, done at
	// each start, was a tenth of the CPU of BenchmarkFanoutDefault/1024,
	// growing with the square of the width. nil outside any run.
	at     *info
	mu     sync.Mutex
	values map[any]any
	onEnd  []func() provider.Usage
	limit  int64        // token limit, 0 for none
	used   atomic.Int64 // tokens used so far, children's included
	// reserved is the part of the budget set aside for work running inside
	// tool calls (Reserve); it is changed under mu.
	reserved atomic.Int64
	up       *scope // the run that started this one, or nil
	// em and span are the event sink and the span of ctx, once Observe
	// recorded them (span is not nil).
	em   event.Emitter
	span trace.Span
	// prices prices the run's model calls (SetPrices, or the parent's);
	// cost and unpriced add up what they cost, the sub-runs' included.
	prices   *provider.Prices
	cost     float64
	unpriced []string
	// saved is what the prompt cache saved on the run's model calls, at
	// the same prices, the sub-runs' included (AddCost).
	saved float64
	// costLimit bounds cost, in US dollars, 0 for none (SetCostLimit, or
	// the share of a step of its parent: costShared).
	costLimit  float64
	costShared bool
	// readBack: the run's answer is read again by the run that started
	// it, out of the part of its budget this run got (ReadBack).
	readBack bool
	// done: the run has finished (Finish); OnEnd refuses more work.
	// closed: the run has reported its cost (CloseCost); it takes no
	// more. flags: flagDenied, denials holds one (AddDenial), so that a
	// run with none, as most are, reads them without taking mu;
	// flagTallied, the run tallies what it spends (TrackSpent). (done,
	// closed and flags share one word: the scope is 480 bytes, in the
	// 480-byte size class, and a word more would take it to the 512-byte
	// one.)
	done   bool
	closed bool
	flags  atomic.Uint32 // flagDenied, flagTallied
	// held is the part of the cost limit held for work that outlives the
	// tool call that started it (HoldCostShare), not yet spent; hold is
	// the hold this run spends from, nil for none. held changes under mu.
	held float64
	hold *costHold
	// queued and refused count model calls that waited for admission and
	// sub-agents a limit refused, in this run and the runs under it.
	// (Int32s keep the scope in the 480-byte size class.)
	queued, refused atomic.Int32
	// earlier and earlierCost are the part of the run's spending, and of
	// cost, that earlier runs of its journaled turn made (AddEarlier),
	// the sub-runs' included; changed under mu.
	earlier     provider.Usage
	earlierCost float64
	// rare is what few runs keep (a policy's denials, a tally), made
	// when first needed; changed under mu. (A pointer keeps the scope in
	// the 480-byte size class, and a run that keeps neither, as most do,
	// allocates nothing for them.)
	rare *rareState
}

// rareState is a scope's rare part: denials are what a policy denied in
// the run and the runs under it (AddDenial), at most maxDenials; tally
// what the model calls under it spent since TrackSpent (AddSpent).
type rareState struct {
	denials []error
	tally   provider.Usage
}

// rareOf returns sc's rare part, making it; sc.mu is held.
func (sc *scope) rareOf() *rareState {
	if sc.rare == nil {
		sc.rare = &rareState{}
	}
	return sc.rare
}

// maxDenials bounds the denials a run keeps: a model that insists on a
// denied call cannot grow a run's memory without end.
const maxDenials = 64

// AddDenial records err, a policy's denial, in the run of ctx and every
// run it is inside (the first maxDenials of each).
func AddDenial(ctx context.Context, err error) {
	for sc := from(ctx).scope; sc != nil; sc = sc.up {
		sc.mu.Lock()
		if r := sc.rareOf(); len(r.denials) < maxDenials {
			r.denials = append(r.denials, err)
		}
		sc.mu.Unlock()
		sc.flags.Or(flagDenied)
	}
}

// Denials returns what a policy denied in the run of ctx and the runs
// under it, in the order denied (the first maxDenials).
func Denials(ctx context.Context) []error {
	sc := from(ctx).scope
	if sc == nil || sc.flags.Load()&flagDenied == 0 {
		return nil
	}
	sc.mu.Lock()
	var out []error
	if sc.rare != nil && len(sc.rare.denials) > 0 {
		out = slices.Clone(sc.rare.denials)
	}
	sc.mu.Unlock()
	return out
}

// ReadBack reports whether the run of ctx was given part of the budget of
// the run that started it (a token or cost share, ForRun): its answer
// goes back to that run, which reads it as input, out of the same part. A
// run that reserves a reply's tokens before its model calls then reserves
// them twice.
func ReadBack(ctx context.Context) bool {
	sc := from(ctx).scope
	return sc != nil && sc.readBack
}

// A Tally is something a run counts for its Output, its sub-agents' included.
type Tally int

// What a run counts.
const (
	// Queued: a model call waited for admission before it went.
	Queued Tally = iota
	// Refused: a sub-agent was refused for a limit.
	Refused
)

// Count counts one t in the run of ctx and every run it is inside.
// Outside a run it does nothing.
func Count(ctx context.Context, t Tally) {
	for sc := from(ctx).scope; sc != nil; sc = sc.up {
		if t == Queued {
			sc.queued.Add(1)
		} else {
			sc.refused.Add(1)
		}
	}
}

// WithPrices returns ctx under which a run started outside any run here
// is priced at p (its own agent's prices aside), as the run elsewhere
// that ctx stands for (WithPlace) is.
func WithPrices(ctx context.Context, p *provider.Prices) context.Context {
	return context.WithValue(ctx, pricesKey{}, p)
}

type pricesKey struct{}

// pricesElsewhere returns the prices of WithPrices, or nil. Only a run
// started outside any run here reads them.
func pricesElsewhere(ctx context.Context) *provider.Prices {
	p, _ := ctx.Value(pricesKey{}).(*provider.Prices)
	return p
}

// SetPrices sets the prices of the model calls of the run of ctx and of
// the runs it starts (which inherit them) when p is not nil.
func SetPrices(ctx context.Context, p *provider.Prices) {
	if sc := from(ctx).scope; sc != nil && p != nil {
		sc.mu.Lock()
		sc.prices = p
		sc.mu.Unlock()
	}
}

// Price returns what u, spent by one call to model of providerName, cost
// at the prices of the run of ctx, and whether they price it; false too
// when the run has no prices.
func Price(ctx context.Context, providerName, model string, u provider.Usage) (float64, bool) {
	p, ok := PriceOf(ctx, providerName, model)
	if !ok {
		return 0, false
	}
	return p.Cost(u), true
}

// PriceOf returns the price, at the prices of the run of ctx, of model of
// providerName, and whether they price it; for a model not named (""),
// one the prices lack, the dearest they hold (provider.Prices.Dearest).
func PriceOf(ctx context.Context, providerName, model string) (provider.Price, bool) {
	sc := from(ctx).scope
	if sc == nil {
		return provider.Price{}, false
	}
	sc.mu.Lock()
	prices := sc.prices
	sc.mu.Unlock()
	if prices == nil {
		return provider.Price{}, false
	}
	if p, ok := prices.Lookup(providerName, model); ok || model != "" {
		return p, ok
	}
	// No model named, and none has answered yet: the dearest the prices
	// hold, so that a reservation does not take the call to cost nothing.
	return prices.Dearest()
}

// ReservePriceOf is the price a call to model of providerName is
// reserved at under a cost limit: PriceOf, and for a model the prices
// lack (a router's "auto", say, whose replies name the model that
// answered), the dearest they hold, so that the call is bounded though
// what it costs is not known until its reply names a priced model.
func ReservePriceOf(ctx context.Context, providerName, model string) (provider.Price, bool) {
	if p, ok := PriceOf(ctx, providerName, model); ok || model == "" {
		return p, ok
	}
	return PriceOf(ctx, providerName, "")
}

// Priced reports whether the run of ctx has prices.
func Priced(ctx context.Context) bool {
	sc := from(ctx).scope
	if sc == nil {
		return false
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.prices != nil
}

// AddCost adds dollars to the cost of the run of ctx and every run it is
// inside, and saved to what the prompt cache saved them
// (provider.Price.Saved); unpriced, when not "", names a model its prices
// lack. A run that has reported its cost (CloseCost) takes no more, nor do
// the runs it is inside: what work it left running spends after that is
// counted only in that work's record (TrackSpend), for a later run to take.
func AddCost(ctx context.Context, dollars, saved float64, unpriced string) {
	addCost(ctx, dollars, saved, unpriced, nil, nil)
}

// AddCall is AddCost for one model call made under ctx, m, with its cost
// (m.Cost) and what the prompt cache saved on it (m.CacheSaved). Under
// work that outlives the run that started it (TrackSpend), the call counts
// in that run, as a whole, only if the run has not reported its cost yet:
// counted is then called, under the lock with which the run reports its
// cost, to add the call to what else the run reports of it (its ledger):
// a call that ends as the run reports its cost counts there in dollars
// and in its ledger, or in neither. Outside such work counted is not
// called.
func AddCall(ctx context.Context, m provider.ModelUsage, unpriced string, counted func()) {
	addCost(ctx, m.Cost, m.CacheSaved, unpriced, []provider.ModelUsage{m}, counted)
}

// AddCalls is AddCall for the model calls of a piece of work replayed
// from a journal (ms, each with its cost), in one step: under work that
// outlives the run that started it, the run counts all of them, and
// counted is called, or, once the run has reported its cost, none.
func AddCalls(ctx context.Context, ms []provider.ModelUsage, counted func()) {
	var dollars, saved float64
	for _, m := range ms {
		dollars += m.Cost
		saved += m.CacheSaved
	}
	addCost(ctx, dollars, saved, "", ms, counted)
}

func addCost(ctx context.Context, dollars, saved float64, unpriced string, ms []provider.ModelUsage, counted func()) {
	ri := from(ctx)
	sp := ri.spend // the record of the work ctx is in, until its run is reached
	for sc := ri.scope; sc != nil; sc = sc.up {
		if sp == nil {
			sp = sc.info.spend
		}
		if sc.hold != nil {
			sc.hold.spend(dollars)
		}
		sc.mu.Lock()
		closed := sc.closed
		if !closed {
			sc.cost += dollars
			sc.saved += saved
			if unpriced != "" && !slices.Contains(sc.unpriced, unpriced) && len(sc.unpriced) < 64 {
				sc.unpriced = append(sc.unpriced, unpriced)
			}
		}
		if sp != nil && sp.sc == sc {
			// Under the lock that closes the run: what it counted is what
			// it reports.
			sp.total += dollars
			if !closed {
				sp.counted += dollars
				for _, m := range ms {
					sp.count(m)
				}
				if counted != nil {
					counted()
				}
			}
			sp = nil
		}
		sc.mu.Unlock()
		if closed {
			break
		}
	}
	if sp != nil {
		sp.sc.mu.Lock()
		sp.total += dollars
		sp.sc.mu.Unlock()
	}
}

// A Spend is the record of what work that outlives the run that started
// it (a thread's background job) spends, in US dollars (TrackSpend), and of
// the part that run counted before it reported its cost (CloseCost): in
// dollars, and, of its model calls (AddCall), by provider and model.
type Spend struct {
	sc             *scope // the run that started the work; its mu guards the rest
	total, counted float64
	models         []provider.ModelUsage
	// taken: the run took all the work spent (Owed) before it reported:
	// it counts none of it as it reports (CloseCost). No other run takes
	// the work's tokens from it.
	taken bool
}

// spendsKey keys, in a run's values, the records of the work it started
// that outlives it (TrackSpend), as a []*Spend.
type spendsKey struct{}

// count adds m, a model call the run counted, to its models. sc.mu is held.
func (s *Spend) count(m provider.ModelUsage) {
	for i := range s.models {
		if e := &s.models[i]; e.Provider == m.Provider && e.Model == m.Model {
			*e = e.Add(m)
			return
		}
	}
	s.models = append(s.models, m)
}

// TrackSpend gives dst, the context of work that outlives the tool call
// of ctx, a record of what it spends (AddCost under dst, in the runs
// started under it too). Outside a run it returns dst and nil.
func TrackSpend(ctx, dst context.Context) (context.Context, *Spend) {
	sc := from(ctx).scope
	if sc == nil {
		return dst, nil
	}
	di := from(dst)
	di.spend = &Spend{sc: sc}
	sc.mu.Lock()
	spends, _ := sc.values[spendsKey{}].([]*Spend)
	if sc.values == nil {
		sc.values = map[any]any{}
	}
	sc.values[spendsKey{}] = append(spends, di.spend)
	sc.mu.Unlock()
	return context.WithValue(dst, key{}, &di), di.spend
}

// Owed returns what of all, all the work has spent (its tokens, counted
// as a whole when it is collected), the run of ctx that takes it now
// counts. The run that started the work takes all of it, if it has not
// reported its cost yet (CloseCost), and then counts none of the work's
// tokens as it reports. Any other run, or that one once it has reported,
// counts all less the tokens of the model calls (AddCall) that run counts
// (whose cost it counts too), whether it has reported yet or not: the
// tokens of a call go where its dollars go, whichever run takes the work
// and when. A nil Spend owes all.
func (s *Spend) Owed(ctx context.Context, all provider.Usage) provider.Usage {
	if s == nil {
		return all
	}
	s.sc.mu.Lock()
	defer s.sc.mu.Unlock()
	if from(ctx).scope == s.sc && !s.sc.closed {
		s.taken = true
		return all
	}
	return Minus(all, s.models)
}

// Minus returns all less the usage of models, each count no lower than 0:
// what of work that spent all is left once the model calls some run
// counted (Spend.Counted) are taken out.
func Minus(all provider.Usage, models []provider.ModelUsage) provider.Usage {
	for _, m := range models {
		all = usage.Less(all, m.Usage)
	}
	return all
}

// Uncounted returns what the work has spent that the run that started it
// did not count: all it spent once that run reported its cost, less what
// it spent before; 0 while the run goes on. A nil Spend has spent nothing.
func (s *Spend) Uncounted() float64 {
	if s == nil {
		return 0
	}
	s.sc.mu.Lock()
	defer s.sc.mu.Unlock()
	return s.total - s.counted
}

// Counted returns the model calls of the work (AddCall) that the run that
// started it counted, by provider and model, with what they cost.
func (s *Spend) Counted() []provider.ModelUsage {
	if s == nil {
		return nil
	}
	s.sc.mu.Lock()
	defer s.sc.mu.Unlock()
	return slices.Clone(s.models)
}

// SetCostLimit bounds what the run of ctx and the runs under it may cost,
// in US dollars; 0 sets no bound.
func SetCostLimit(ctx context.Context, dollars float64) {
	if sc := from(ctx).scope; sc != nil && dollars > 0 {
		sc.mu.Lock()
		if !sc.costShared || dollars < sc.costLimit {
			sc.costLimit = dollars
		}
		sc.mu.Unlock()
	}
}

// CostLeft returns the least that any run ctx is inside may still spend,
// in US dollars, by its cost limit, and whether any has one. The cost of
// every run counts at once in the runs it is inside (AddCost), so a
// child's check sees what its siblings spent up to their last reply.
func CostLeft(ctx context.Context) (float64, bool) {
	left, limited := 0.0, false
	for sc := from(ctx).scope; sc != nil; sc = sc.up {
		sc.mu.Lock()
		shared := sc.costShared
		if sc.costLimit > 0 {
			if l := sc.costLimit - sc.cost - sc.held; !limited || l < left {
				left = l
			}
			limited = true
		}
		sc.mu.Unlock()
		if shared {
			break // its share is its part of the runs above
		}
	}
	return left, limited
}

// Spent returns what the model calls of the run of ctx have spent since
// TrackSpent (AddSpent), its sub-runs' included, those still running too,
// and what the run has cost so far (Cost), in one step.
func Spent(ctx context.Context) (provider.Usage, float64) {
	sc := from(ctx).scope
	if sc == nil {
		return provider.Usage{}, 0
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var u provider.Usage
	if sc.flags.Load()&flagTallied != 0 {
		u = sc.rare.tally
	}
	return u, sc.cost
}

// Cost returns what the run of ctx has cost so far, its sub-runs'
// included, and the models its prices lack.
func Cost(ctx context.Context) (float64, []string) {
	sc := from(ctx).scope
	if sc == nil {
		return 0, nil
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.cost, slices.Clone(sc.unpriced)
}

// CloseCost returns what the run of ctx cost, its sub-runs' included, the
// models its prices lack and what the prompt cache saved, as Cost and
// Saved do, and closes its books in the same step: from then on it takes
// no more cost (AddCost). lasting is the tokens of the model calls it
// counted (AddCall) of the work it started that outlives it and that it
// has not taken (Spend.Owed): the run counts them as spent, as it counts
// their cost. A run calls it once, to report its cost.
func CloseCost(ctx context.Context) (cost float64, unpriced []string, saved float64, lasting provider.Usage) {
	sc := from(ctx).scope
	if sc == nil {
		return 0, nil, 0, provider.Usage{}
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.closed = true
	spends, _ := sc.values[spendsKey{}].([]*Spend)
	for _, sp := range spends {
		if !sp.taken {
			for _, m := range sp.models {
				lasting = lasting.Add(m.Usage)
			}
		}
	}
	return sc.cost, slices.Clone(sc.unpriced), sc.saved, lasting
}

// Saved returns what the prompt cache has saved the run of ctx so far, its
// sub-runs' included, in US dollars at its prices (AddCost).
func Saved(ctx context.Context) float64 {
	sc := from(ctx).scope
	if sc == nil {
		return 0
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.saved
}

// AddEarlier records that u, which cost dollars, was spent by an earlier
// run of the turn the run of ctx belongs to (before a resume or a
// restart) and is counted again now from the turn's journal: a recorded
// model answer, or a recorded tool call's result. It adds to the run of
// ctx and every run it is inside, as AddCost does; the caller counts u in
// its usage and its cost (AddCost) as if spent now, so that what a turn
// spent, and its limits, carry on across runs, and this only says which
// part of it came before.
func AddEarlier(ctx context.Context, u provider.Usage, dollars float64) {
	if u.IsZero() && dollars == 0 {
		return
	}
	ri := from(ctx)
	for t := ri.tally; t != nil; t = t.up {
		t.mu.Lock()
		t.earlier = t.earlier.Add(u)
		t.cost += dollars
		t.mu.Unlock()
	}
	for sc := ri.scope; sc != nil; sc = sc.up {
		sc.mu.Lock()
		sc.earlier = sc.earlier.Add(u)
		sc.earlierCost += dollars
		sc.mu.Unlock()
	}
}

// Earlier returns the part of what the run of ctx has spent, its
// sub-runs' included, that earlier runs of its turn spent (AddEarlier),
// and what that part cost.
func Earlier(ctx context.Context) (provider.Usage, float64) {
	sc := from(ctx).scope
	if sc == nil {
		return provider.Usage{}, 0
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.earlier, sc.earlierCost
}

// Counts returns what the run of ctx has counted so far, its sub-agents'
// included.
func Counts(ctx context.Context) (queued, refused int) {
	sc := from(ctx).scope
	if sc == nil {
		return 0, 0
	}
	return int(sc.queued.Load()), int(sc.refused.Load())
}

// Local returns the value stored under key for the run of ctx, calling
// init to create and store it on the first call; later calls in the same run
// return that same value. Tools use it for state that lives as long as one
// run of the agent calling them, such as a count of the sub-agents it has
// started. The result is what init returned, as an any: assert it back to
// init's type. Use a key of a type unexported in the caller's package, as
// for context.WithValue, so that no other package reaches the value.
// Outside a run nothing is stored and it returns a fresh init().
func Local(ctx context.Context, key any, init func() any) any {
	sc := from(ctx).scope
	if sc == nil {
		return init()
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if v, ok := sc.values[key]; ok {
		return v
	}
	if sc.values == nil {
		sc.values = map[any]any{}
	}
	v := init()
	sc.values[key] = v
	return v
}

// TreeLocal is Local for the tree of ctx: the value is stored for the
// tree's top run, and every run of the tree gets the same one.
func TreeLocal(ctx context.Context, key any, init func() any) any {
	sc := from(ctx).scope
	if sc == nil {
		return init()
	}
	for sc.up != nil {
		sc = sc.up
	}
	return Local(sc.ctx, key, init)
}

// Context returns the context of the run ctx belongs to, which lives as
// long as the run (the context a tool call receives may end with the call).
// Work a tool leaves running after its call returns derives its context
// from it. Outside a run it returns ctx.
func Context(ctx context.Context) context.Context {
	if sc := from(ctx).scope; sc != nil {
		return sc.ctx
	}
	return ctx
}

// Same reports whether a and b belong to one run (both outside any run:
// false).
func Same(a, b context.Context) bool {
	sa := from(a).scope
	return sa != nil && sa == from(b).scope
}

// OnEnd registers fn to run when the run of ctx ends, before the run
// reports its outcome. fn must stop and wait for whatever work the run left
// behind; the usage it returns is added to the run's ChildUsage. It reports
// false, and does not register fn, outside a run or once the run has ended.
func OnEnd(ctx context.Context, fn func() provider.Usage) bool {
	sc := from(ctx).scope
	if sc == nil {
		return false
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.done {
		return false
	}
	sc.onEnd = append(sc.onEnd, fn)
	return true
}

// Finish ends the run of ctx: it calls the functions registered with
// OnEnd, the latest first, waiting for each (they stop and wait for work
// the run's tools left running), and returns the sum of the usage they
// report, for the run's ChildUsage. Once it returns, OnEnd refuses new
// functions. An agent that starts its runs with Start calls Finish once,
// at the end of its run, before reporting the outcome. Outside a run it
// does nothing.
func Finish(ctx context.Context) provider.Usage {
	sc := from(ctx).scope
	if sc == nil {
		return provider.Usage{}
	}
	var total provider.Usage
	for {
		sc.mu.Lock()
		sc.done = len(sc.onEnd) == 0
		if sc.done {
			sc.mu.Unlock()
			return total
		}
		fn := sc.onEnd[len(sc.onEnd)-1]
		sc.onEnd = sc.onEnd[:len(sc.onEnd)-1]
		sc.mu.Unlock()
		total = total.Add(fn())
	}
}

// Limit returns the token limit of the run of ctx, 0 for none.
func Limit(ctx context.Context) int64 {
	if sc := from(ctx).scope; sc != nil {
		return sc.limit
	}
	return 0
}

// Shares is the part of a run's budget set aside, as a step's tool calls
// begin, for the sub-agents they start: one equal share per call (AtStep).
type Shares struct {
	sc   *scope
	each int64
	mu   sync.Mutex
	n    int // shares not taken yet
	// held is what the shares tool calls took into their pots (TakeShare)
	// still hold reserved in sc, out what of them runs still hold
	// (Grants not settled); released: Release has given back the rest.
	held, out int64
	released  bool
}

// UnstartedNote says why a sub-agent made no model call: its share of its
// parent's budget could not pay for one.
const UnstartedNote = "not started: its budget could not pay for a model call"

// UnstartedLine and UnstartedReport are the results of a call whose
// sub-agent's share could not pay for its first model call, as its
// parent reads them: the note, or under WithReport the partial Report
// that holds it.
const (
	UnstartedLine   = "[" + UnstartedNote + "]"
	UnstartedReport = `{"status":"partial","summary":"` + UnstartedNote + `","findings":null}`
)

// RefusalBytes is what the result of a tool call whose sub-agent's share
// could not pay for its first model call weighs, in bytes: the longer of
// UnstartedLine and UnstartedReport, since the run cannot tell which a
// call will answer. A step's shares are at least what reading it costs
// (shareOut).
const RefusalBytes = max(len(UnstartedLine), len(UnstartedReport))

// Floor is what the run reads, in tokens as its estimate counts them, of
// the result of any one of calls whose sub-agent could not start: a
// refusal of refusal bytes (RefusalBytes in process) and the call's id.
// A step's shares are at least this when what is left pays it for every
// call and a token of reply.
func Floor(calls []provider.ToolCall, refusal int) int64 {
	id := 0
	for _, c := range calls {
		id = max(id, len(c.ID))
	}
	return (int64(refusal+id) + 3) / 4
}

// FollowBound is the output bound of a call estimated to read est tokens
// that offers tools: its reply, m tokens, is read again by the next call
// with a note of note tokens, and that call writes reply tokens, so
// 2·est + 2·m + note + reply fit the tokens left (tokens < 0: no token
// limit) and, when priced, the dollars left at price (readBack: the run's
// answer is read again at the input price).
func FollowBound(tokens, est, note, reply int64, priced bool, dollars float64, price provider.Price, readBack bool) int64 {
	out := int64(math.MaxInt64)
	if tokens >= 0 {
		out = (tokens - 2*est - note - reply) >> 1
	}
	if priced {
		in := price.Input
		rest := dollars - float64(2*est+note)*in - price.Output
		if readBack {
			rest -= in
		}
		if each := price.Output + in; each > 0 {
			out = min(out, int64(math.Floor(rest/each)))
		} else if rest < 0 {
			out = min(out, 0)
		}
	}
	return out
}

// CallTokens is the least a tool call of one of tools weighs, in tokens
// as the estimate counts them: its name and empty arguments.
func CallTokens(tools []provider.ToolDef) int64 {
	least := math.MaxInt
	for _, t := range tools {
		least = min(least, len(t.Name)+2)
	}
	return max((int64(least)+3)/4, 1)
}

// Readable returns how many of calls, in order, a run with avail tokens
// left to read their results (after what its wrap-up reads and a token
// of its reply) can run (runs): each result at least Floor of
// floorBytes, the calls after them answered with a refusal of
// refusalBytes bytes and the call's id; and how many of those the run
// cannot pay to read even that of (unread), the last ones, which are
// left out of what its model reads. A run with avail below 0 cannot pay
// for its wrap-up anyway: it runs them all.
func Readable(avail int64, calls []provider.ToolCall, floorBytes, refusalBytes int) (runs, unread int) {
	if avail < 0 {
		return len(calls), 0
	}
	refused := make([]int64, len(calls)+1) // refused[i]: reading the refusals of calls[i:]
	for i := len(calls) - 1; i >= 0; i-- {
		refused[i] = refused[i+1] + (int64(refusalBytes+len(calls[i].ID))+3)/4
	}
	for k := len(calls); k > 0; k-- {
		if int64(k)*Floor(calls[:k], floorBytes)+refused[k] <= avail {
			return k, 0
		}
	}
	n := 0
	for n < len(calls) && refused[0]-refused[n+1] <= avail {
		n++
	}
	return 0, len(calls) - n
}

// shareOut sets aside, in ri, for the calls of a step about to run
// (AtStep, Step.Share), an equal share each of what the run of ctx has
// left: a cost share, in ri, when a run ctx is inside has a cost limit,
// and shares of tokens, in sh, when the run has a token limit, which it
// reports. A sub-agent tool takes its call's share (TakeShare)
// before its child starts, so that whatever a child spends, its siblings
// keep theirs.
//
// The run keeps back first what its next model call will read before the
// calls' results (keep tokens, costing keepCost dollars), then splits the
// rest in calls+1 equal parts: one a call, and one for the reply of its
// next call. A child's answer, which that call reads too, comes out of
// the child's share (ReadBack); so does the refusal of one that could not
// start: a share is at least what reading that costs (floor tokens, at
// price's input price), when the rest pays for as much for every call and
// a token of reply, so that it is never read out of the reply's part.
func shareOut(ctx context.Context, ri *info, sh *Shares, calls int, keep int64, keepCost float64, floor int64, price provider.Price) bool {
	sc := ri.scope
	if sc == nil || calls < 1 {
		return false
	}
	if left, limited := CostLeft(ctx); limited {
		rest := left - keepCost
		each := rest / float64(calls+1)
		if f := float64(floor) * price.Input; each < f && rest-float64(calls)*f >= price.Output {
			each = f
		}
		ri.costShare = max(each, 1e-12) // not 0, which is no limit
	}
	if sc.limit == 0 {
		return false
	}
	sc.mu.Lock()
	left := max(sc.limit-sc.used.Load()-sc.reserved.Load()-max(keep, 0), 0)
	each := left / int64(calls+1)
	if each < floor && left >= int64(calls)*floor+1 {
		each = floor
	}
	sh.sc, sh.each, sh.n = sc, each, calls
	sc.reserved.Add(sh.each * int64(calls))
	sc.mu.Unlock()
	ri.shares = sh
	return true
}

// Release gives back the shares no call took, and what the calls' runs
// did not spend of those they took, but for what runs still going hold
// (given back as they settle): call it once the step's calls have ended.
// On a nil Shares it does nothing.
func (sh *Shares) Release() {
	if sh == nil || sh.sc == nil {
		return
	}
	sh.mu.Lock()
	back := sh.each * int64(sh.n)
	if !sh.released {
		// What runs still going hold stays set aside until they settle.
		back += max(sh.held-sh.out, 0)
		sh.held = min(sh.held, sh.out)
	}
	sh.n, sh.released = 0, true
	sh.mu.Unlock()
	if back > 0 {
		sh.sc.mu.Lock()
		sh.sc.reserved.Add(-back)
		sh.sc.mu.Unlock()
	}
}

// TakeShare takes, for the child a tool call starts, of what the call's
// share of its step's budget (Step.Share) has left, keeping at most upTo
// tokens of it (0: all): all of it when sole (the call's tool is the
// sub-agent tool, whose child is the call's only one), else half, since a
// tool of the user's that starts children itself cannot say how many more
// it will start: each later one gets its part of what the ones before it
// left (Grant.SettleRead). It returns the tokens kept, whether a share was
// set aside at all (false: the run has no limit, or the call is not a
// step's), and the Grant that ends the reservation with what the child
// spent, as Reserve's does (nil when nothing is kept, whose Settle does
// nothing). A call whose share is all taken or spent gives 0, as does one
// of a step whose shares are all taken.
func TakeShare(ctx context.Context, upTo int64, sole bool) (granted int64, ok bool, g *Grant) {
	ri := from(ctx)
	sh := ri.shares
	if sh == nil {
		return 0, false, nil
	}
	if c := ri.call; c != nil {
		c.mu.Lock()
		p := c.potOf(sh)
		kept := p.tokens
		if !sole {
			kept /= 2
		}
		if upTo > 0 && upTo < kept {
			kept = upTo
		}
		p.tokens -= kept
		sh.mu.Lock()
		sh.out += kept
		sh.mu.Unlock()
		c.mu.Unlock()
		return kept, true, &Grant{sc: sh.sc, granted: kept, call: c, sh: sh}
	}
	sh.mu.Lock()
	if sh.n == 0 {
		sh.mu.Unlock()
		return 0, true, nil
	}
	sh.n--
	sh.mu.Unlock()
	sc := sh.sc
	kept := sh.each
	if upTo > 0 && upTo < kept {
		kept = upTo
		sc.mu.Lock()
		sc.reserved.Add(kept - sh.each)
		sc.mu.Unlock()
	}
	return kept, true, &Grant{sc: sc, granted: kept}
}

// potOf returns the call's pot, taking one of sh's shares into it the
// first time (none left: an empty one). c.mu is held.
func (c *callAt) potOf(sh *Shares) *callPot {
	if c.pot == nil {
		c.pot = &callPot{}
	}
	p := c.pot
	if sh != nil && !p.claimed {
		p.claimed = true
		sh.mu.Lock()
		if sh.n > 0 && !sh.released {
			sh.n--
			p.tokens, p.held = sh.each, sh.each
			sh.held += sh.each
		}
		sh.mu.Unlock()
	}
	return p
}

// TakeCostShare takes, for a run a tool call starts, of what the call's
// cost share (Step.Share) has left, as TakeShare does of its tokens: all
// of it when sole, else half. settle gives back what the run did not spend
// once it has ended, less what reading its answer (read tokens, at the
// input price of the step's run) costs. Without a cost share it returns 0;
// outside a step's call, the share, which settle leaves as it is. A share
// used up is a tiny positive amount, not 0, which is no limit.
func TakeCostShare(ctx context.Context, sole bool) (dollars float64, settle func(spent float64, read int64)) {
	ri := from(ctx)
	if ri.costShare <= 0 {
		return 0, func(float64, int64) {}
	}
	c := ri.call
	if c == nil || ri.step == nil {
		return ri.costShare, func(float64, int64) {}
	}
	price := ri.step.price.Input
	c.mu.Lock()
	p := c.potOf(nil)
	if !p.costSet {
		p.dollars, p.costSet = ri.costShare, true
	}
	dollars = p.dollars
	if !sole {
		dollars /= 2
	}
	p.dollars -= dollars
	c.mu.Unlock()
	if dollars <= 0 {
		dollars = 1e-12 // used up: bounded, not 0, which is no limit
	}
	var once sync.Once
	return dollars, func(spent float64, read int64) {
		once.Do(func() {
			c.mu.Lock()
			p.dollars = max(p.dollars+dollars-spent-float64(read)*price, 0)
			c.mu.Unlock()
		})
	}
}

// A Grant is tokens of a run's budget set aside for work done inside one
// of its tool calls (Reserve, TakeShare), until Settle ends it.
type Grant struct {
	sc      *scope
	granted int64
	settled atomic.Bool
	// call and sh: the grant came out of the call's pot, a share of sh.
	call *callAt
	sh   *Shares
}

// Settle ends the grant: call it once the work has ended, with the tokens
// it spent. Those tokens count as used from then on, and the grant's no
// longer set aside. Calls after the first, and on a nil Grant, do
// nothing.
func (g *Grant) Settle(spent int64) { g.SettleRead(spent, 0) }

// SettleRead is Settle for work whose result its run reads as read
// tokens: a grant out of a tool call's share gives back to it what the
// work neither spent nor needs for that reading, for the next child the
// call starts (TakeShare).
func (g *Grant) SettleRead(spent, read int64) {
	if g == nil || g.settled.Swap(true) {
		return
	}
	if c := g.call; c != nil {
		c.mu.Lock()
		p := c.pot
		p.tokens = max(p.tokens+g.granted-max(spent, 0)-max(read, 0), 0)
		// The part of the share it spent goes from set aside to used; once
		// the step has given back the rest (Release), all it held.
		sh := g.sh
		sh.mu.Lock()
		sh.out -= g.granted
		var d int64
		if sh.released {
			d = min(g.granted, sh.held)
		} else {
			d = min(max(spent, 0), p.held)
			p.held -= d
		}
		sh.held -= d
		sh.mu.Unlock()
		c.mu.Unlock()
		g.sc.mu.Lock()
		g.sc.reserved.Add(-d)
		g.sc.used.Add(spent)
		g.sc.mu.Unlock()
		return
	}
	g.sc.mu.Lock()
	g.sc.reserved.Add(-g.granted)
	g.sc.used.Add(spent)
	g.sc.mu.Unlock()
}

// drawn is what a run started under a tool call took of the call's share
// (Start), for Settle to give back.
type drawn struct {
	tokens *Grant
	cost   func(spent float64, read int64)
}

type drawnKey struct{}

// Settle ends what the run of ctx took of the share of the tool call it
// was started under, when it was started by the user's own tool rather
// than by a sub-agent tool (Start): spent is what it used, its sub-runs'
// included, and read what its answer weighs, in tokens, for the run that
// started it to read. What it cost is its own (Cost). A run calls it once,
// as it ends; outside such a run it does nothing.
func Settle(ctx context.Context, spent, read int64) {
	sc := from(ctx).scope
	if sc == nil {
		return
	}
	sc.mu.Lock()
	d, _ := sc.values[drawnKey{}].(*drawn)
	cost := sc.cost
	sc.mu.Unlock()
	if d == nil {
		return
	}
	d.tokens.SettleRead(spent, read)
	if d.cost != nil {
		d.cost(cost, read)
	}
}

// CostShared reports whether the step ctx belongs to gave each of its
// calls a share of what its run may still spend (Step.Share).
func CostShared(ctx context.Context) bool { return from(ctx).costShare > 0 }

// CostShare returns the share of what its run may still spend that the
// step ctx belongs to gave each call, 0 for none.
func CostShare(ctx context.Context) float64 { return from(ctx).costShare }

// costHold is a cost share held in the run that gave it (sc) for work
// that outlives its tool call: what of it the work has not spent yet
// (left) is not the run's to spend. left changes under sc.mu.
type costHold struct {
	sc   *scope
	left float64
}

// spend draws dollars, just spent by the work, from the hold.
func (h *costHold) spend(dollars float64) {
	h.sc.mu.Lock()
	d := min(max(dollars, 0), h.left)
	h.left -= d
	h.sc.held -= d
	h.sc.mu.Unlock()
}

// HoldCostShare gives dst, the context of work that outlives the tool call
// of ctx (a background job), that call's share of what its run may still
// spend (Step.Share): the run that gave it holds it, so that its later
// steps do not share it out again (CostLeft leaves it out), until the
// work spends it or the function returned gives back what it did not
// spend; call that once the work's cost is all counted and read. Without
// a cost share it returns dst and does nothing.
//
// Of the share, what margin costs at the run's price (Step.Price) goes
// back to the run at once, as KeepShare's margin does: what the run
// spends to look after the work (a job's receipt, which its later calls
// read, and the call that collects it) comes out of the work's share, not
// out of the reserve that pays for the run's wrap-up.
func HoldCostShare(ctx, dst context.Context, margin provider.Usage) (context.Context, func()) {
	ri := from(ctx)
	share := ri.costShare
	if share <= 0 || ri.scope == nil {
		return dst, func() {}
	}
	if ri.step != nil {
		// Not all of it: the work keeps a sliver, as a share used up does
		// (ForRun), so that it stays bounded.
		share = max(share-ri.step.price.Cost(margin), 1e-12)
	}
	h := &costHold{sc: ri.scope, left: share}
	h.sc.mu.Lock()
	h.sc.held += share
	h.sc.mu.Unlock()
	di := from(dst)
	di.costShare, di.hold = share, h
	var once sync.Once
	return context.WithValue(dst, key{}, &di), func() {
		once.Do(func() { h.spend(math.Inf(1)) })
	}
}

// HasShares reports whether the step ctx belongs to set shares aside
// (Step.Share), taken or not.
func HasShares(ctx context.Context) bool { return from(ctx).shares != nil }

// TokenShare returns the tokens of each share the step of ctx set aside,
// or, in work KeepShare gave a share to, that share's: 0 when it set none
// aside, or has none left to give.
func TokenShare(ctx context.Context) int64 {
	sh := from(ctx).shares
	if sh == nil {
		return 0
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.n == 0 {
		return 0
	}
	return sh.each
}

// KeepShare moves one share of the step of ctx, if it set any aside, to
// dst, for work that outlives the call, such as a background job: the
// step giving back its untaken shares does not take that one. The
// function it returns gives the share back if the work never took it;
// call it once the work has ended.
//
// Of the share, margin tokens go back to the run at once: what the run
// spends to look after the work (a job's receipt, which its later calls
// read, and the call that collects it) comes out of the work's share.
func KeepShare(ctx, dst context.Context, margin int64) (context.Context, func()) {
	sh := from(ctx).shares
	if sh == nil {
		return dst, func() {}
	}
	sh.mu.Lock()
	if sh.n == 0 {
		sh.mu.Unlock()
		ri := from(dst)
		ri.shares = &Shares{sc: sh.sc}
		return context.WithValue(dst, key{}, &ri), func() {}
	}
	sh.n--
	sh.mu.Unlock()
	own := &Shares{sc: sh.sc, each: sh.each, n: 1}
	if back := min(max(margin, 0), own.each); back > 0 {
		own.each -= back
		sh.sc.mu.Lock()
		sh.sc.reserved.Add(-back)
		sh.sc.mu.Unlock()
	}
	ri := from(dst)
	ri.shares = own
	return context.WithValue(dst, key{}, &ri), own.Release
}

// SetUsed records that the run of ctx has used n tokens so far, its
// children's included, as its agent counts them after each step. TokensLeft
// and Reserve take it off the limit. Outside a run it does nothing.
func SetUsed(ctx context.Context, n int64) {
	if sc := from(ctx).scope; sc != nil {
		sc.used.Store(n)
	}
}

// TokensLeft returns how many tokens the run of ctx may still use, and
// whether it has a limit at all. Sub-agent tools use it to give a child a
// budget taken from what its parent has left.
func TokensLeft(ctx context.Context) (n int64, limited bool) {
	sc := from(ctx).scope
	if sc == nil || sc.limit == 0 {
		return 0, false
	}
	return max(sc.limit-sc.used.Load()-sc.reserved.Load(), 0), true
}

// Reserve sets aside up to n tokens of the token budget of the run of ctx
// for work done inside one of its tool calls, such as a sub-agent, so that
// work started beside it — the other calls of a parallel step — is not
// promised the same tokens. It returns how many it set aside: n, or what is
// left when that is less. When the run has no token limit it sets nothing
// aside and returns n, false and a nil Grant.
//
// The Grant's Settle ends the reservation; call it once the work has
// ended, with the tokens it spent, from the tool call that made the
// reservation (or from work registered with OnEnd). Those tokens count as
// used from then on, so that a call that starts later in the same step
// sees them before the run folds the call's Result.
func Reserve(ctx context.Context, n int64) (granted int64, limited bool, g *Grant) {
	sc := from(ctx).scope
	if sc == nil || sc.limit == 0 {
		return n, false, nil
	}
	sc.mu.Lock()
	granted = min(max(n, 0), max(sc.limit-sc.used.Load()-sc.reserved.Load(), 0))
	sc.reserved.Add(granted)
	sc.mu.Unlock()
	return granted, true, &Grant{sc: sc, granted: granted}
}

// Prefix returns the request of the step whose tool calls ctx is under
// (Step.Prefix), or nil.
func Prefix(ctx context.Context) *provider.Request {
	if ri, ok := ctx.Value(key{}).(*info); ok && ri.step != nil {
		return ri.step.prefix
	}
	return nil
}

// Asked is what a run's model calls ask, the provider's name and the
// model, and the model that answered the last of them ("" when no reply
// named one), as a step gives it to the runs its calls start (Step.Asked):
// a router's default model may be one no price names, and a run that asks
// the same as its parent is reserved at the price of the model that
// answered the parent (Answered). It must not change once given.
type Asked struct {
	Provider, Model, Answered string
}

// Answered returns the model that answered the last call of the run whose
// step's tool calls ctx is under (Step.Asked), when that run's calls ask
// model of providerName too, or "".
func Answered(ctx context.Context, providerName, model string) string {
	if ri, ok := ctx.Value(key{}).(*info); ok && ri.step != nil && ri.step.asked != nil &&
		ri.step.asked.Provider == providerName && ri.step.asked.Model == model {
		return ri.step.asked.Answered
	}
	return ""
}

// overdraft is what the runs of one tree share about the model calls that
// may pass their runs' limits (Uncovered): one at a time is in flight
// (turn holds a token while one is), and what they passed their runs'
// limits by, in all, is taken off what any run of the tree has left
// before such a call is made, so that the tree passes its limit by at
// most the estimation error of one call. It lives in the values of the
// tree's top run, made by the first such call.
type overdraft struct {
	turn    chan struct{}
	mu      sync.Mutex
	tokens  int64
	dollars float64
	// earlier holds, by the name of each journaled turn runs of the
	// tree run under, what calls of that turn's earlier runs passed
	// their runs' limits by (RecordedDebt): added to the debt by the
	// first call to take the turn after the turn's first run of the tree
	// began, and then nil.
	earlier map[string]func() (tokens int64, dollars float64)
}

// overdraftOf returns the overdraft of the tree whose top run is sc,
// making it.
func overdraftOf(sc *scope) *overdraft {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	o, _ := sc.values[overdraftKey{}].(*overdraft)
	if o == nil {
		o = &overdraft{turn: make(chan struct{}, 1)}
		if sc.values == nil {
			sc.values = map[any]any{}
		}
		sc.values[overdraftKey{}] = o
	}
	return o
}

// RecordedDebt tells the tree of ctx that a run of it runs under the
// journal of the turn named turn, before any of the run's model calls:
// the first time a run of the tree does so, sum, which returns what the
// calls of that turn's earlier runs that took the tree's turn passed
// their runs' limits by (a turn resumed from its journal), is added to
// the tree's debt before the next such call plans (Uncovered), so that a
// resumed turn plans as the turn run once would. A tree's runs can run
// under several journals (a worker with a turn of its own): each is
// added once, however many runs run under it. Outside a run it does
// nothing.
func RecordedDebt(ctx context.Context, turn string, sum func() (tokens int64, dollars float64)) {
	sc := from(ctx).scope
	if sc == nil {
		return
	}
	for sc.up != nil {
		sc = sc.up
	}
	o := overdraftOf(sc)
	o.mu.Lock()
	if _, ok := o.earlier[turn]; !ok {
		if o.earlier == nil {
			o.earlier = map[string]func() (int64, float64){}
		}
		o.earlier[turn] = sum
	}
	o.mu.Unlock()
}

type overdraftKey struct{}

// An OuterTurn is the turn of the model calls that may pass their runs'
// limits of a tree kept outside this process, which the tree of runs here
// is part of (the agent a factory builds in a Temporal activity is a child
// of a workflow's tree). Take waits for the turn and returns what such
// calls of that tree passed their runs' limits by so far, their own
// included; ok is false when the turn cannot be had, and the call then
// takes this process's turn alone. Done ends a turn Take gave, with what
// the call passed its run's limits by.
type OuterTurn interface {
	Take(ctx context.Context) (tokens int64, dollars float64, ok bool, err error)
	Done(tokens int64, dollars float64)
}

type outerTurnKey struct{}

// WithOuterTurn makes the model calls of the runs started under ctx that
// may pass their runs' limits take t as well as the turn of their tree
// here, each in turn: what the outer tree's calls passed their limits by
// is what such a call plans with, or the tree's own debt here when that
// is more (calls that went without the outer turn). It is read from the
// context of the tree's top run.
func WithOuterTurn(ctx context.Context, t OuterTurn) context.Context {
	return context.WithValue(ctx, outerTurnKey{}, t)
}

// An Overdraft is the turn of one model call that may pass its run's
// limits (Uncovered), until Done ends it.
type Overdraft struct {
	o       *overdraft
	outer   OuterTurn // taken too; nil: none
	tokens  int64
	dollars float64
	// left is what the run had left as the call was planned (Left).
	leftTokens  int64
	leftDollars float64
}

// Uncovered waits until no other model call of the tree of ctx whose worst
// case its run's limits cannot pay for is in flight, then takes the turn
// for one: what such calls passed their runs' limits by so far (Debt) is
// to be taken off what the run has left before the call is planned again,
// and the call ends the turn with what it passed them by (Done). It
// returns ctx's error if ctx ends first. Outside a run it returns a nil
// Overdraft, whose methods do nothing.
//
// What such calls of earlier runs of the journaled turns the tree's runs
// run under passed their runs' limits by (RecordedDebt) counts in that
// debt.
//
// A call whose estimate fits what is left less that debt passes its run's
// limit by at most its own estimation error less the debt, so the debt
// never grows past the estimation error of one call, and no run of the
// tree passes its limit by more in all.
func Uncovered(ctx context.Context) (*Overdraft, error) {
	sc := from(ctx).scope
	if sc == nil {
		return nil, nil
	}
	for sc.up != nil {
		sc = sc.up
	}
	o := overdraftOf(sc)
	select {
	case o.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	o.mu.Lock()
	for turn, sum := range o.earlier {
		if sum == nil {
			continue
		}
		// No call under the turn's journal has taken the tree's turn
		// since the tree's first run under it began (each takes it here
		// first): what the journal holds of such calls is what the
		// turn's earlier runs recorded.
		o.earlier[turn] = nil
		tokens, dollars := sum()
		o.tokens += max(tokens, 0)
		o.dollars += max(dollars, 0)
	}
	d := &Overdraft{o: o, tokens: o.tokens, dollars: o.dollars, leftTokens: math.MaxInt64, leftDollars: math.Inf(1)}
	o.mu.Unlock()
	if ot, _ := sc.ctx.Value(outerTurnKey{}).(OuterTurn); ot != nil {
		tokens, dollars, ok, err := ot.Take(ctx)
		if err != nil {
			<-o.turn
			return nil, err
		}
		if ok {
			// The outer tree's debt counts this tree's calls too: they
			// told it what they passed their limits by. Those that went
			// without its turn, or whose telling was lost, it has not
			// heard of: the tree's own debt counts them, and is never
			// planned past.
			d.outer, d.tokens, d.dollars = ot, max(tokens, d.tokens), max(dollars, d.dollars)
		}
	}
	return d, nil
}

// Debt returns what the tree's model calls have passed their runs'
// limits by so far, in tokens and in dollars, as the turn began.
func (d *Overdraft) Debt() (tokens int64, dollars float64) {
	if d == nil {
		return 0, 0
	}
	return d.tokens, d.dollars
}

// Left records what the run had left of its limits, in tokens and in
// dollars, as the call was planned, before the debt was taken off (the
// default: no limit).
func (d *Overdraft) Left(tokens int64, dollars float64) {
	if d != nil {
		d.leftTokens, d.leftDollars = tokens, dollars
	}
}

// Done ends the turn once the call has been made, with what it spent:
// what passes what the run had left (Left) is added to the tree's debt,
// and returned, for the call's record. Calls after the first, and on a
// nil Overdraft, do nothing.
func (d *Overdraft) Done(tokens int64, dollars float64) (overTokens int64, overDollars float64) {
	if d == nil || d.o == nil {
		return 0, 0
	}
	o := d.o
	d.o = nil
	overTokens, overDollars = max(tokens-d.leftTokens, 0), max(dollars-d.leftDollars, 0)
	o.mu.Lock()
	o.tokens += overTokens
	o.dollars += overDollars
	o.mu.Unlock()
	if d.outer != nil {
		d.outer.Done(overTokens, overDollars)
	}
	<-o.turn
	return overTokens, overDollars
}
