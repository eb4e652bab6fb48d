package cassette

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
)

// Position returns the place in its tree of the model call made under
// ctx, as a cassette keys it: the names of the agents that led to it from
// the top-level run, separated by "/", each but the first followed by "@"
// and the place of the tool call that started it in its parent's run (the
// parent's step, from 1, "." and the call's index in that step, from 0):
// "lead/team@1.0/researcher@1.3". It is the same every time the same tree
// runs, whatever order parallel calls run in, and "" outside an agent's
// run.
func Position(ctx context.Context) string { return run.Position(ctx) }

// Provider is a provider.Provider that answers from a cassette (Replay),
// records the calls it passes to a live provider (Record), or both, by
// position (Rerecord). Each model call is keyed by its place in the tree
// (Position) and its order among the calls at that place (its step), and
// by the hash of its request with what changes from run to run left out
// (Request): a replayed call is answered by the entry at its position and
// step whose hash is its request's, or else by an unused entry at its
// position with that hash, so that parallel siblings replay whatever order
// they run in. A call with no match fails with a *MissError.
//
// One Provider serves one run of a tree, or the runs of one journaled turn
// (a run and its resumes, which count steps on): the steps it counts start
// at 0. Make one a run; a Cassette serves any number. It is safe for
// concurrent use. It streams to a caller that asks (Stream), recorded or
// replayed.
type Provider struct {
	base  *Cassette         // the cassette answered from; nil when recording all
	live  provider.Provider // nil when replaying
	match func(pos string) bool
	fork  *forkState // Fork's; nil otherwise
	norm  func(*provider.Request)
	name  string
	miss  func(*MissError)

	mu sync.Mutex
	// The calls made so far at each place (the step of the next): at the
	// first few places in few, past them in steps. A small tree then takes
	// no map (BenchmarkDelegation/recorded: 2 allocations and 256 bytes
	// less of 7 and 2,112).
	few      [4]placeSteps
	steps    map[string]int
	used     map[int]bool
	recorded []raw
	misses   []*MissError
	liveN    int
	tools    []toolsKey
}

// An Option configures a Provider.
type Option func(*Provider)

// WithNormalize has fn change each request before it is keyed, for the
// parts of a request the application makes differ from run to run (a
// date in a system prompt, an id in a tool's result): fn may change req
// and its messages' fields, not the slices' elements the caller shares,
// which it must copy first. It runs on every call, recorded or replayed.
func WithNormalize(fn func(req *provider.Request)) Option {
	return func(p *Provider) { p.norm = fn }
}

// WithMissHandler has fn called with each call that finds no match, at
// once, before the call fails; Open reports the miss on its test with it.
func WithMissHandler(fn func(*MissError)) Option {
	return func(p *Provider) { p.miss = fn }
}

func newProvider(base *Cassette, live provider.Provider, opts []Option) *Provider {
	p := &Provider{base: base, live: live}
	if base != nil {
		p.used = map[int]bool{}
	}
	for _, o := range opts {
		o(p)
	}
	if base != nil {
		p.name = base.provider
	}
	if n, ok := live.(provider.Namer); ok && live != nil {
		p.name = n.Name()
	}
	return p
}

// Replay returns a Provider that answers every call from c, with no live
// provider behind it.
func Replay(c *Cassette, opts ...Option) *Provider {
	if c == nil {
		c, _ = newCassette(nil)
	}
	return newProvider(c, nil, opts)
}

// Record returns a Provider that passes every call to live and records it
// (Cassette). A call's messages are kept as the caller sent them, not
// copied, until the cassette is asked for: a caller appends to its
// conversation and never edits a message it sent (provider.Message), as
// the agent loop does.
func Record(live provider.Provider, opts ...Option) *Provider {
	p := newProvider(nil, live, opts)
	p.match = func(string) bool { return true }
	return p
}

// Rerecord returns a Provider that passes to live the calls made at a
// position pattern matches, and records them, and answers the others from
// c, as Replay does. Its Cassette keeps c's entries at the positions
// pattern does not match and the new ones, so that re-recording the one
// node whose prompt changed leaves the rest of the cassette as it was.
//
// pattern is one or more patterns of path.Match, separated by commas; a
// pattern matches a position when it matches the position or the start
// of it that ends before one of its "/": "*" matches every position,
// "lead/critic@*" a critic the lead called and everything under it, and
// "*/*/researcher@1.3" one researcher two levels down.
func Rerecord(c *Cassette, live provider.Provider, pattern string, opts ...Option) (*Provider, error) {
	match, err := Matcher(pattern)
	if err != nil {
		return nil, err
	}
	if live == nil {
		return nil, errors.New("cassette: re-recording needs a live provider")
	}
	p := newProvider(c, live, opts)
	p.match = match
	return p, nil
}

// Matcher returns the function that reports whether a position matches
// pattern, as Rerecord matches them, or an error naming the pattern that
// is malformed.
func Matcher(pattern string) (func(pos string) bool, error) {
	pats := strings.Split(pattern, ",")
	for i, pat := range pats {
		pats[i] = strings.TrimSpace(pat)
		if _, err := path.Match(pats[i], ""); err != nil || pats[i] == "" {
			return nil, fmt.Errorf("cassette: position pattern %q is not a pattern of path.Match: write it as lead/researcher@1.*", pat)
		}
	}
	return func(pos string) bool {
		for _, pat := range pats {
			for p := pos; ; {
				if ok, _ := path.Match(pat, p); ok {
					return true
				}
				i := strings.LastIndexByte(p, '/')
				if i < 0 {
					break
				}
				p = p[:i]
			}
		}
		return false
	}, nil
}

// Name is the name of the live provider, or of the one the cassette was
// recorded from, so that a replayed run is priced and admitted as the
// recorded one was.
func (p *Provider) Name() string { return p.name }

// Complete answers req from the cassette, or passes it to the live
// provider and records it.
func (p *Provider) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	return p.answer(ctx, &req, nil)
}

// Stream answers req as Complete does, and hands onDelta the answer as it
// comes (provider.Streamer): a recorded call through a live provider that
// streams, as the live one streams it; a replayed one, or one recorded
// from a provider that does not stream, as a delta of its text and one of
// each tool call, before Stream returns. What is recorded is the same
// either way: the whole answer.
func (p *Provider) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	return p.answer(ctx, &req, onDelta)
}

// answer is Complete and Stream, on their own copy of the request;
// onDelta is nil for Complete.
func (p *Provider) answer(ctx context.Context, req *provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	if err := ctx.Err(); err != nil {
		return provider.Response{}, fmt.Errorf("cassette: %w", err)
	}
	if p.norm != nil {
		p.normalize(req)
	}
	pos := run.Position(ctx)
	if pos == "" {
		pos = "-" // a call made outside any agent's run
	}
	p.mu.Lock()
	step := p.next(pos)
	live := p.match != nil && p.match(pos)
	if p.fork != nil {
		live = p.fork.live(pos, live)
	}
	p.mu.Unlock()
	if live {
		return p.record(ctx, req, pos, step, onDelta)
	}
	hash := hashRequest(req, p.toolsHash(req.Tools))
	p.mu.Lock()
	e := p.find(pos, step, hash)
	if e != nil && p.fork != nil {
		// Kept at the step it answered now (Cassette).
		r := *e
		r.Step = step
		p.fork.replayed = append(p.fork.replayed, r)
	}
	p.mu.Unlock()
	switch {
	case e == nil:
		return provider.Response{}, p.missed(pos, step, hash, req)
	case e.Error != "":
		return provider.Response{}, fmt.Errorf("cassette: the recorded call failed: %s", e.Error)
	}
	return e.Response.answer(onDelta)
}

// placeSteps is how many calls were made at a place.
type placeSteps struct {
	pos string
	n   int
}

// next returns the step of a call at pos, and counts it; called with
// p.mu held.
func (p *Provider) next(pos string) int {
	for i := range p.few {
		switch ps := &p.few[i]; ps.pos {
		case pos:
			ps.n++
			return ps.n - 1
		case "":
			*ps = placeSteps{pos, 1}
			return 0
		}
	}
	if p.steps == nil {
		p.steps = map[string]int{}
	}
	n := p.steps[pos]
	p.steps[pos] = n + 1
	return n
}

// answer is the recorded response, handed to onDelta when it is not nil
// (stream).
//
//go:noinline
func (r *Response) answer(onDelta func(provider.Delta) error) (provider.Response, error) {
	if onDelta != nil {
		return stream(r.response(), onDelta)
	}
	return r.response(), nil
}

// stream hands onDelta resp's text in one delta and each of its tool
// calls in one, and returns resp; or, when onDelta fails, its error as it
// is and no response, as a provider.Streamer does.
//
//go:noinline
func stream(resp provider.Response, onDelta func(provider.Delta) error) (provider.Response, error) {
	if resp.Message.Content != "" {
		if err := onDelta(provider.Delta{Text: resp.Message.Content}); err != nil {
			return provider.Response{}, err
		}
	}
	for i, c := range resp.Message.ToolCalls {
		if err := onDelta(provider.Delta{ToolCall: provider.ToolCallDelta{Index: i, ID: c.ID, Name: c.Name, Arguments: string(c.Arguments)}}); err != nil {
			return provider.Response{}, err
		}
	}
	return resp, nil
}

// normalize has WithNormalize's function change req, through a copy: a
// request whose address goes to a function value moves to the heap, and
// when that was Complete's own, it did on every call, normalized or not
// (3 allocations and 430 bytes of a 3-call delegation recorded).
//
//go:noinline
func (p *Provider) normalize(req *provider.Request) {
	r := *req
	p.norm(&r)
	*req = r
}

// toolsHash returns the hash of tools' definitions. The calls of one
// agent send the same definitions again and again: the last few hashes
// are kept by the address of the definitions' first element, with the
// definitions they hashed, and a hash is reused only for the very same,
// unchanged definitions.
func (p *Provider) toolsHash(tools []provider.ToolDef) string {
	if len(tools) == 0 {
		return ""
	}
	p.mu.Lock()
	for i := range p.tools {
		k := &p.tools[i]
		if &k.defs[0] == &tools[0] && len(k.defs) == len(tools) && sameDefs(k.copied, tools) {
			h := k.hash
			p.mu.Unlock()
			return h
		}
	}
	p.mu.Unlock()
	h := toolsHash(tools)
	p.mu.Lock()
	if len(p.tools) == 8 {
		p.tools = p.tools[1:]
	}
	p.tools = append(p.tools, toolsKey{defs: tools, copied: slices.Clone(tools), hash: h})
	p.mu.Unlock()
	return h
}

// toolsKey is one set of tool definitions toolsHash hashed.
type toolsKey struct {
	defs, copied []provider.ToolDef
	hash         string
}

// sameDefs reports whether a and b hold the same definitions: the same
// strings and schemas, compared by address first.
func sameDefs(a, b []provider.ToolDef) bool {
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Description != b[i].Description || string(a[i].Parameters) != string(b[i].Parameters) {
			return false
		}
	}
	return true
}

// find returns the entry that answers the call, marked used, or nil;
// called with p.mu held.
func (p *Provider) find(pos string, step int, hash string) *Entry {
	list := p.base.byPos[pos]
	for _, i := range list {
		if e := &p.base.entries[i]; e.Step == step && e.Hash == hash {
			p.used[i] = true
			return e
		}
	}
	for _, i := range list {
		if e := &p.base.entries[i]; !p.used[i] && e.Hash == hash {
			p.used[i] = true
			return e
		}
	}
	return nil
}

// record is kept out of Complete's frame, as missed is: a large frame
// there grows the stack of every goroutine a tool call starts.
//
//go:noinline
func (p *Provider) record(ctx context.Context, req *provider.Request, pos string, step int, onDelta func(provider.Delta) error) (provider.Response, error) {
	var resp provider.Response
	var err error
	st, streams := p.live.(provider.Streamer)
	switch {
	case onDelta != nil && streams:
		var failed error // onDelta's: the caller stopped the stream
		resp, err = st.Stream(ctx, *req, func(d provider.Delta) error {
			failed = onDelta(d)
			return failed
		})
		if failed != nil && err == failed {
			return resp, err // not the model's answer
		}
	default:
		resp, err = p.live.Complete(ctx, *req)
	}
	if err != nil && ctx.Err() != nil {
		return resp, err // a cancelled call is not the model's answer
	}
	// The request is kept as it was sent, its messages shared with the
	// caller's (a conversation is appended to, and a message once sent is
	// never edited: provider.Message), and normalized and hashed when the
	// cassette is asked for (Cassette), off the run's path. Copying them
	// cost a recorded delegation 3 of its 73 allocations.
	p.mu.Lock()
	p.liveN++
	if p.recorded == nil {
		// Room for a small tree's calls at once: growing one call at a
		// time copied the calls recorded so far, three times in a
		// delegation of three calls.
		p.recorded = make([]raw, 0, 4)
	}
	// The slot is taken where make or slices.Grow left it zeroed, and
	// filled field by field: appending a zero raw wrote it twice.
	if len(p.recorded) == cap(p.recorded) {
		p.recorded = slices.Grow(p.recorded, 1)
	}
	p.recorded = p.recorded[:len(p.recorded)+1]
	c := &p.recorded[len(p.recorded)-1]
	c.pos, c.step, c.model, c.system, c.msgs, c.tools, c.schema = pos, step, req.Model, req.System, req.Messages, req.Tools, req.ResponseSchema
	if err != nil {
		c.failed, c.content = true, err.Error()
	} else {
		c.content, c.calls, c.usage, c.stop, c.answered = resp.Message.Content, resp.Message.ToolCalls, resp.Usage, resp.StopReason, resp.Model
	}
	p.mu.Unlock()
	if err == nil && onDelta != nil && !streams {
		return stream(resp, onDelta)
	}
	return resp, err
}

// raw is a call recorded, as it was made: the parts of its request and
// response a cassette keeps, and no more, for each call recorded is
// written into a growing list on the run's path (at 248 bytes, four fit
// in the 1,024 bytes of the list a small tree starts with).
type raw struct {
	pos           string
	step          int
	model, system string
	msgs          []provider.Message // the request's, shared
	tools         []provider.ToolDef
	schema        []byte
	// The answer's text and tool calls, or the error's text when the
	// call failed.
	content  string
	calls    []provider.ToolCall
	usage    provider.Usage
	stop     provider.StopReason
	answered string // the model that answered
	failed   bool
}

func (c *raw) entry() Entry {
	n := normalize(provider.Request{System: c.system, Messages: c.msgs, Tools: c.tools, ResponseSchema: c.schema})
	e := Entry{Position: c.pos, Step: c.step, Hash: n.Hash(), Request: n, Model: c.model}
	if c.failed {
		e.Error = c.content
	} else {
		msg := provider.AssistantMessage(c.content, c.calls...)
		e.Response = fromResponse(provider.Response{Message: msg, Usage: c.usage, StopReason: c.stop, Model: c.answered})
	}
	return e
}

// LiveCalls returns how many calls went to the live provider.
func (p *Provider) LiveCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.liveN
}

// Misses returns the calls that found no match, in the order they came,
// but for those that differ only because another call missed (see
// MissError.Consequence).
func (p *Provider) Misses() []*MissError {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*MissError(nil), p.misses...)
}

// Cassette returns what the Provider recorded: for Record, every call;
// for Rerecord, the calls it recorded and the entries of its cassette at
// the positions its pattern does not match; for a Fork, the calls it
// recorded and the entries it replayed; for Replay, its cassette.
func (p *Provider) Cassette() (*Cassette, error) {
	p.mu.Lock()
	recorded := slices.Clone(p.recorded)
	p.mu.Unlock()
	entries := make([]Entry, 0, len(recorded))
	for i := range recorded {
		entries = append(entries, recorded[i].entry())
	}
	if p.live == nil {
		return p.base, nil
	}
	if p.fork != nil {
		p.mu.Lock()
		entries = append(entries, p.fork.replayed...)
		p.mu.Unlock()
	} else if p.base != nil {
		for _, e := range p.base.entries {
			if !p.match(e.Position) {
				entries = append(entries, e)
			}
		}
	}
	c, err := newCassette(entries)
	if err != nil {
		return nil, err
	}
	c.provider = p.name
	return c, nil
}

// MissError is the error of a call a cassette holds no answer for.
type MissError struct {
	// Position and Step are the call's place (see Provider), Hash its
	// request's hash.
	Position string
	Step     int
	Hash     string
	// Asked is the request, as the cassette would key it.
	Asked Request
	// Nearest is the recorded call most like it: the one at the same
	// position and step, or the nearest step there, or the same request
	// recorded elsewhere; nil when the cassette holds nothing near.
	Nearest *Entry
	// Rerecording is set when the call was made during a Rerecord whose
	// pattern did not match its position.
	Rerecording bool
	// Consequence is set when the request holds the failure of another
	// call that missed (a sub-agent's, which its parent's model reads as
	// a tool error): the call differs because that one failed, and is
	// not reported apart (Misses leaves it out).
	Consequence bool
	// Cause is, for a Consequence, the first miss under its position.
	Cause *MissError
}

// Unwrap returns Cause.
func (m *MissError) Unwrap() error {
	if m.Cause == nil {
		return nil
	}
	return m.Cause
}

// missMark starts every MissError's text; a request that holds it holds
// another call's miss.
const missMark = "cassette: no recorded answer"

//go:noinline
func (p *Provider) missed(pos string, step int, hash string, req *provider.Request) *MissError {
	m := &MissError{Position: pos, Step: step, Hash: hash, Asked: normalize(*req), Rerecording: p.live != nil && p.fork == nil}
	nreq := &m.Asked
	for _, msg := range nreq.Messages {
		if strings.Contains(msg.Content, missMark) {
			m.Consequence = true
			p.mu.Lock()
			for _, root := range p.misses {
				if strings.HasPrefix(root.Position, pos+"/") {
					m.Cause = root
					break
				}
			}
			p.mu.Unlock()
			return m
		}
	}
	p.mu.Lock()
	m.Nearest = p.base.nearest(pos, step, hash)
	p.misses = append(p.misses, m)
	p.mu.Unlock()
	if p.miss != nil {
		p.miss(m)
	}
	return m
}

// nearest returns the recorded call most like a call at pos and step.
func (c *Cassette) nearest(pos string, step int, hash string) *Entry {
	var best *Entry
	for _, i := range c.byPos[pos] {
		e := &c.entries[i]
		if best == nil || abs(e.Step-step) < abs(best.Step-step) {
			best = e
		}
	}
	if best != nil {
		return best
	}
	for i := range c.entries {
		if c.entries[i].Hash == hash {
			return &c.entries[i]
		}
	}
	// The entry at the position sharing the longest start with pos.
	bestLen := -1
	for i := range c.entries {
		e := &c.entries[i]
		if n := commonSegments(e.Position, pos); n > bestLen || n == bestLen && e.Step == step && best.Step != step {
			best, bestLen = e, n
		}
	}
	if bestLen <= 0 {
		return nil
	}
	return best
}

func commonSegments(a, b string) int {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	n := 0
	for n < len(as) && n < len(bs) && as[n] == bs[n] {
		n++
	}
	return n
}

func abs(n int) int { return max(n, -n) }

func (m *MissError) Error() string {
	if m.Consequence {
		s := fmt.Sprintf("%s for a call under step %d at %s, which was asked with its failure", missMark, m.Step, m.Position)
		if m.Cause != nil {
			s += ": the first is " + m.Cause.Error()
		}
		return s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s for step %d at %s (request %s)", missMark, m.Step, m.Position, m.Hash)
	fmt.Fprintf(&b, "\n  asked: %s", m.Asked.summary())
	if m.Nearest == nil {
		b.WriteString("\n  the cassette holds nothing near that position")
	} else {
		n := m.Nearest
		fmt.Fprintf(&b, "\n  nearest recorded: step %d at %s; what differs (- recorded, + asked):\n", n.Step, n.Position)
		b.WriteString(diff(n.Request.lines(), m.Asked.lines()))
	}
	if m.Rerecording {
		fmt.Fprintf(&b, "\n  the call is not re-recorded: add its position to the pattern (-deputy.record=%q)", m.Position)
	} else {
		fmt.Fprintf(&b, "\n  if the change is meant, re-record this node: go test -run <the test> -deputy.record=%q", m.Position)
	}
	return b.String()
}

// summary is what a request asked, in one line.
func (r *Request) summary() string {
	s := "system " + clip(r.System, 80)
	if n := len(r.Messages); n > 0 {
		last := r.Messages[n-1]
		s += ", " + strconv.Itoa(n) + " messages, the last " + string(last.Role) + " " + clip(last.Content, 120)
	}
	return s
}

// lines renders r one field a line, for a diff.
func (r *Request) lines() []string {
	out := []string{"system: " + strconv.Quote(r.System)}
	for i, m := range r.Messages {
		l := "message " + strconv.Itoa(i) + " " + string(m.Role)
		if m.ToolCallID != "" {
			l += " (result of " + m.ToolCallID + ")"
		}
		if m.IsError {
			l += " (error)"
		}
		out = append(out, l+": "+strconv.Quote(m.Content))
		for _, c := range m.ToolCalls {
			out = append(out, "message "+strconv.Itoa(i)+" calls "+c.ID+" "+c.Name+" "+c.Arguments)
		}
	}
	out = append(out, "tools: "+strings.Join(r.Tools, ", ")+" (definitions "+r.ToolsHash+")")
	if r.Schema != "" {
		out = append(out, "schema: "+r.Schema)
	}
	return out
}

// diff shows the lines of a and b between their common start and end,
// each clipped, at most 12 of each.
func diff(a, b []string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	j := 0
	for j < len(a)-i && j < len(b)-i && a[len(a)-1-j] == b[len(b)-1-j] {
		j++
	}
	var s strings.Builder
	if i > 0 {
		fmt.Fprintf(&s, "    (%d lines the same)\n", i)
	}
	for k, l := range a[i : len(a)-j] {
		if k == 12 {
			fmt.Fprintf(&s, "    - … %d more\n", len(a)-j-i-k)
			break
		}
		s.WriteString("    - " + cut(l, 240) + "\n")
	}
	for k, l := range b[i : len(b)-j] {
		if k == 12 {
			fmt.Fprintf(&s, "    + … %d more\n", len(b)-j-i-k)
			break
		}
		s.WriteString("    + " + cut(l, 240) + "\n")
	}
	if j > 0 {
		fmt.Fprintf(&s, "    (%d lines the same)", j)
	}
	return strings.TrimRight(s.String(), "\n")
}

// clip quotes s cut to n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	return strconv.Quote(cut(s, n)) + "…"
}

// cut cuts s to n bytes on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
