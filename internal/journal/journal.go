// Package journal is the one home of record and replay: the scope of a
// journaled turn that the ReAct loop, the sub-agent tools and tool.Ask
// consult, carried in the context because it must cross agent.Agent and
// tool.Tool implementations deputy does not own.
//
// A turn's journal (a Log: a store.Journal, through package stored, which
// keeps this package, and the tool package that uses it, free of any
// storage package) is divided into scopes. The top-level
// run's scope has the empty prefix; each run of an agent under a scope
// takes the next run key of its name (Next), each model answer of that run
// is recorded under the run key and its step, and each tool call under the
// step and its index: a position in the turn, never an id the provider
// chose, so that a resumed turn finds what the first run recorded whatever
// ids the provider sends. A call's own scope (Child) holds what the call
// itself records: the answers its questions got, and the runs of the
// sub-agent it invokes.
package journal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/deputy-go/deputy/internal/usage"
	"github.com/deputy-go/deputy/provider"
)

// Entry is one record of a turn's journal: a finished model answer, tool
// call or child invocation. It has store.Entry's fields, and converts to
// and from it.
type Entry struct {
	// Content is what the invocation returned to its parent.
	Content string `json:"content,omitempty"`
	// Error, when not empty, is the message of the error the invocation
	// failed with.
	Error string `json:"error,omitempty"`
	// Value is the validated answer as JSON, when the invocation validated.
	Value json.RawMessage `json:"value,omitempty"`
	// Usage is what the invocation cost when it ran.
	Usage provider.Usage `json:"usage"`
	// Models is what the model calls made inside the invocation cost, per
	// provider and model.
	Models []provider.ModelUsage `json:"models,omitempty"`
}

// Log is a turn's journal, as the scopes read and write it.
type Log interface {
	// Turn is the name of the turn the journal records.
	Turn() string
	// Lookup returns the entry recorded under key.
	Lookup(key string) (Entry, bool)
	// Keys returns, in order, the keys recorded that start with prefix.
	Keys(prefix string) []string
	// Record writes the entry before it returns.
	Record(ctx context.Context, key string, e Entry) error
	// Start begins writing the entry; wait waits for the write.
	Start(key string, e Entry) (wait func(context.Context) error)
}

// Scope is the part of a turn's journal one run, or one call, records in.
type Scope struct {
	J      Log
	Prefix string
	// Recorded: the call this scope belongs to is recorded by whoever made
	// it (the ReAct loop journals its tool calls), so what it invokes
	// need not record its own outcome again.
	Recorded bool

	mu       sync.Mutex
	counts   map[string]int
	inflight int                           // invocations running
	waits    []func(context.Context) error // their journal writes not yet awaited
}

type key struct{}

// New returns the top-level scope of j.
func New(j Log) *Scope { return &Scope{J: j, counts: map[string]int{}} }

// With returns ctx carrying s.
func With(ctx context.Context, s *Scope) context.Context {
	return context.WithValue(ctx, key{}, s)
}

// From returns the scope ctx carries, or nil outside a journaled turn.
func From(ctx context.Context) *Scope {
	s, _ := ctx.Value(key{}).(*Scope)
	return s
}

// Key names one invocation of name with args in the scope
// deterministically: a hash of the arguments and how many invocations
// with the same name and arguments came before it.
func (s *Scope) Key(name string, args json.RawMessage) string {
	sum := sha256.Sum256(args)
	return s.next(s.Prefix + name + "." + hex.EncodeToString(sum[:12]))
}

// Peek returns the key the next Key(name, args) returns, without
// counting it.
func (s *Scope) Peek(name string, args json.RawMessage) string {
	sum := sha256.Sum256(args)
	base := s.Prefix + name + "." + hex.EncodeToString(sum[:12])
	s.mu.Lock()
	n := s.counts[base]
	s.mu.Unlock()
	return base + "." + strconv.Itoa(n)
}

// Spent is the key, in the scope of what key records itself (Child), of
// what the thing recorded under key had paid for when it last stopped
// unfinished (cancelled, suspended, failed), over every run of the turn
// until then: so that a run that does not replay all of it, or none,
// still counts it once.
func (s *Scope) Spent(key string) string { return s.Child(key).Prefix + "spent" }

// StepKey is the key of the model answer a run (its key, from Next) got
// at step, and SummaryKey that of the k-th summary (from 1) the run's
// compaction made at the step of key: every model call a journaled run
// pays for is recorded under one of the two, with what it cost, which is
// how Paid finds them.
func StepKey(run string, step int) string { return run + "/m" + strconv.Itoa(step) }

// SummaryKey: see StepKey.
func SummaryKey(step string, k int) string { return step + "/summary-" + strconv.Itoa(k) }

// IsAnswer reports whether key is a StepKey or a SummaryKey.
func IsAnswer(key string) bool {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return false
	}
	last := key[i+1:]
	if n, ok := strings.CutPrefix(last, "summary-"); ok {
		return digits(n) && IsAnswer(key[:i])
	}
	n, ok := strings.CutPrefix(last, "m")
	return ok && digits(n) && strings.HasPrefix(key[strings.LastIndexByte(key[:i], '/')+1:], "run.")
}

func digits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// Paid returns what the thing recorded under key has paid for over the
// runs of the turn until it last stopped unfinished (see PaidUnder), and
// false when it has paid for nothing.
func (s *Scope) Paid(key string) (Entry, bool) {
	return s.PaidUnder(s.Spent(key), s.Child(key).Prefix)
}

// PaidUnder returns what a piece of work that stopped unfinished has paid
// for: what it recorded under spentKey when it stopped (Spent), and the
// model answers recorded under prefix, its own part of the journal, that
// the record does not count. The record can lag behind the answers, or be
// missing, when the process was killed after an answer was paid for and
// recorded and before the work could record what it had paid for; the
// answers cannot count what a tool reported itself, or a model call that
// was paid for and never recorded. Together they count each paid call
// once.
func (s *Scope) PaidUnder(spentKey, prefix string) (Entry, bool) {
	rec, found := s.J.Lookup(spentKey)
	var answers []provider.ModelUsage
	for _, k := range s.J.Keys(prefix) {
		if !IsAnswer(k) {
			continue
		}
		e, ok := s.J.Lookup(k)
		if !ok {
			continue
		}
		if len(e.Models) == 0 {
			// Recorded without its model: counted as unpriced.
			answers = addModel(answers, provider.ModelUsage{Usage: e.Usage})
			continue
		}
		for _, m := range e.Models {
			answers = addModel(answers, m)
		}
	}
	for _, a := range answers {
		var got provider.ModelUsage
		for _, m := range rec.Models {
			if m.Provider == a.Provider && m.Model == a.Model {
				got = m
				break
			}
		}
		more := beyond(a, got)
		if more.Usage.IsZero() {
			continue
		}
		rec.Models = addModel(rec.Models, more)
		rec.Usage = rec.Usage.Add(more.Usage)
		found = true
	}
	return rec, found
}

// addModel adds m to the entry of its provider and model in ms.
func addModel(ms []provider.ModelUsage, m provider.ModelUsage) []provider.ModelUsage {
	for i := range ms {
		if ms[i].Provider == m.Provider && ms[i].Model == m.Model {
			ms = slices.Clone(ms)
			ms[i] = ms[i].Add(m)
			return ms
		}
	}
	return append(slices.Clip(ms), m)
}

// beyond is what a counts that b does not, field by field (what the cache
// saved may be below nought: cache writes can cost more than reads save).
func beyond(a, b provider.ModelUsage) provider.ModelUsage {
	u, v := a.Usage, b.Usage
	return provider.ModelUsage{Provider: a.Provider, Model: a.Model, Cost: max(a.Cost-b.Cost, 0), CacheSaved: a.CacheSaved - b.CacheSaved,
		Usage: usage.Less(u, v)}
}

// Next names the next thing called name in the scope: name and how many
// came before it.
func (s *Scope) Next(name string) string { return s.next(s.Prefix + name) }

func (s *Scope) next(base string) string {
	s.mu.Lock()
	n := s.counts[base]
	s.counts[base] = n + 1
	s.mu.Unlock()
	return base + "." + strconv.Itoa(n)
}

// Child returns the scope of what the thing recorded under key records
// itself.
// A key deep in a tree is hashed (the same way every run of the turn), so
// that the keys under it stay within a store key's bound.
func (s *Scope) Child(key string) *Scope {
	if len(key) > maxPrefix {
		sum := sha256.Sum256([]byte(key))
		key = "h." + hex.EncodeToString(sum[:])
	}
	return &Scope{J: s.J, Prefix: key + "/", counts: map[string]int{}}
}

// maxPrefix bounds a scope's prefix, leaving room under store.MaxKeyBytes
// for the keys of a few levels more.
const maxPrefix = 256

// ID returns a stable id with the given prefix for the thing recorded
// under key in the turn: the same on every run of the turn.
func (s *Scope) ID(prefix, key string) string {
	sum := s.Sum(key)
	return prefix + hex.EncodeToString(sum[:12])
}

// Sum returns the hash ID derives its id from: the same in every run of
// the turn.
func (s *Scope) Sum(key string) []byte {
	sum := sha256.Sum256([]byte(s.J.Turn() + "\x1f" + key))
	return sum[:]
}

// Enter counts an invocation in progress (see Leave).
func (s *Scope) Enter() {
	s.mu.Lock()
	s.inflight++
	s.mu.Unlock()
}

// Leave ends an invocation that started the journal write wait (nil when
// it records nothing). The last invocation of the scope to end gets every
// write not yet awaited, its own included, to wait for: siblings return at
// once, free for the next child, and the parent still has every finished
// child recorded when its batch of tool calls is done.
func (s *Scope) Leave(wait func(context.Context) error) []func(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if wait != nil {
		s.waits = append(s.waits, wait)
	}
	s.inflight--
	if s.inflight > 0 {
		return nil
	}
	w := s.waits
	s.waits = nil
	return w
}

type onceKey struct{}

// WithOnce returns ctx for the step tool.Once runs under the journal key
// whose Sum is sum: the step reads it with OnceSum, to name what it sends
// the same in every run of the turn (a message a resumed run sends again).
func WithOnce(ctx context.Context, sum []byte) context.Context {
	return context.WithValue(ctx, onceKey{}, sum)
}

// OnceSum returns the sum WithOnce gave ctx, or nil outside a step of
// tool.Once under a journal.
func OnceSum(ctx context.Context) []byte {
	s, _ := ctx.Value(onceKey{}).([]byte)
	return s
}

// AnswerKey is the journal key of the answer to the interrupt id: the id
// is unique in the turn, so the key is too. A run resumed with the answer
// finds it used once it is recorded there (tool.UnusedAnswers): by the
// call that asked, or, for a question a thread's background job asked
// under a journal of its own, by the wait that handed the job its answer.
func AnswerKey(id string) string { return "answer/" + id }
