// Package mailbox is the link between a background child and whoever
// steers it: the messages sent to the child, which its ReAct loop takes at
// a step boundary (before a model call, never during one), and what the
// loop reports back at each boundary (the step it reached, its last words,
// what it spent so far). It rides the context because it must cross the
// agent.Agent implementations between the job and the loop; the loop takes
// it out of the context it hands its tools, so that only the child's own
// loop reads it.
package mailbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/deputy-go/deputy/internal/usage"
	"github.com/deputy-go/deputy/provider"
)

// MaxQueued bounds the messages waiting in one box; a send past it is
// refused until the child takes them.
const MaxQueued = 64

// MaxReceipts bounds the receipts a box lists (Receipts): past it, the
// oldest of those no longer queued leave the list, and are counted
// (Dropped). It is at least MaxQueued, so that a queued message is always
// listed.
const MaxReceipts = 64

// MaxMessages bounds the messages one box takes in its life: a box knows
// each by its id, to answer a message sent again with its receipt (exactly
// once), even when its receipt has left the list.
const MaxMessages = 1024

// Message is one message sent to a child. ID is the same each time the
// turn that sent it runs, so that a message sent again after a restart is
// recognized.
type Message struct {
	ID   string `json:"id"`
	Text string `json:"text"`
	// From is the span the message was sent under, if traced: the model
	// call of the step that takes it links to it. It lives in memory only.
	From trace.SpanContext `json:"-"`
}

// Receipt says where a message stands. State is Queued, Delivered or
// Undelivered;
// Step is the step of the child it was delivered before (0 while queued);
// Seq is its place among the box's messages, from 1.
type Receipt struct {
	ID    string `json:"message_id"`
	State string `json:"state"`
	Step  int    `json:"step,omitempty"`
	Seq   int    `json:"seq"`
}

// The states of a message.
const (
	Queued      = "queued"
	Delivered   = "delivered"
	Undelivered = "undelivered" // the child ended before a step could take it
)

// Box is the mailbox of one child. It is safe for concurrent use.
type Box struct {
	mu      sync.Mutex
	queue   []Message
	known   map[string]*Receipt // every message sent or replayed, by id; made by the first (see remember)
	order   []string            // ids of the last MaxReceipts, in the order they were sent
	seq     int                 // messages sent or replayed, for Receipt.Seq
	dropped int                 // receipts left out of order (see trim)
	step    int
	last    string
	usage   provider.Usage
	cost    float64
	changed func() // called, outside the lock, when a message is delivered or a step reached
	// live, set by the child's run (Live), says what it has spent by now,
	// its own children's calls included, between its steps.
	live   func() (provider.Usage, float64)
	closed bool // the child has ended: Send refuses

	// note holds a change and its notification together, so that they
	// are told in the order they happened (a message queued before it is
	// delivered); it is taken before mu.
	note   sync.Mutex
	notify Notify
}

// Notify is told what happens in a box, in order, outside the box's own
// lock but one change at a time: each message queued (not one sent again)
// and each delivery, with the receipts of the messages the child took;
// and, as the child's loop begins a step, before it takes what waits
// (Began), the step, told outside that order, so that whoever fills the
// box from elsewhere can fill it then. Any may be nil.
type Notify struct {
	Queued    func(Message, Receipt)
	Delivered func([]Receipt)
	Began     func(step int)
}

// SetNotify sets what is told of the box's changes from now on.
func (b *Box) SetNotify(n Notify) {
	b.note.Lock()
	b.notify = n
	b.note.Unlock()
}

// New returns an empty box; changed, if not nil, is called whenever the
// child takes a message or reaches a step.
func New(changed func()) *Box { return &Box{changed: changed} }

// remember records r, under b.mu. The map is made here, not in New: most
// background jobs are never sent a message, and a job started and
// collected allocates one object fewer.
func (b *Box) remember(r *Receipt) {
	if b.known == nil {
		b.known = map[string]*Receipt{}
	}
	b.known[r.ID] = r
}

// ErrClosed is returned by Send once the child has ended (Close).
var ErrClosed = errors.New("mailbox: the child has ended and takes no more messages")

// ErrTooMany is returned by Send once MaxMessages were sent.
var ErrTooMany = fmt.Errorf("mailbox: the child has been sent %d messages, the most one child takes: start another job to go on", MaxMessages)

// ErrFull is returned by Send when MaxQueued messages wait.
var ErrFull = fmt.Errorf("mailbox: %d messages are waiting for the child to take them: wait for it to reach its next step, then send again", MaxQueued)

// Send queues a message, or, if a message of the same id was sent or
// delivered already, returns where that one stands (exactly once).
func (b *Box) Send(m Message) (Receipt, error) { return b.send(m, true) }

// Requeue queues a message sent to the child before a restart, as Send
// does but past MaxQueued: it was let in under that bound when sent, and
// those the child took before the restart wait again until its loop
// replays the steps that took them (Replayed). MaxMessages still bounds it.
func (b *Box) Requeue(m Message) (Receipt, error) { return b.send(m, false) }

// send is Send, bounded by MaxQueued if bounded is set.
func (b *Box) send(m Message, bounded bool) (Receipt, error) {
	b.note.Lock()
	defer b.note.Unlock()
	b.mu.Lock()
	if r, ok := b.known[m.ID]; ok {
		b.mu.Unlock()
		return *r, nil
	}
	if b.closed {
		b.mu.Unlock()
		return Receipt{}, ErrClosed
	}
	if bounded && len(b.queue) >= MaxQueued {
		b.mu.Unlock()
		return Receipt{}, ErrFull
	}
	if b.seq >= MaxMessages {
		b.mu.Unlock()
		return Receipt{}, ErrTooMany
	}
	r := b.add(m.ID)
	r.State = Queued
	b.queue = append(b.queue, m)
	b.trim()
	sent := *r
	b.mu.Unlock()
	if b.notify.Queued != nil {
		b.notify.Queued(m, sent)
	}
	return sent, nil
}

// Close records that the child has ended: the messages still queued will
// never be taken, so their receipts say Undelivered, and Send refuses from
// now on with ErrClosed.
func (b *Box) Close() {
	b.note.Lock()
	defer b.note.Unlock()
	b.mu.Lock()
	b.closed = true
	for _, m := range b.queue {
		b.known[m.ID].State = Undelivered
	}
	b.queue = nil
	b.trim()
	b.mu.Unlock()
}

// Suspend records that the child has stopped to wait for a person: Send
// refuses from now on with ErrClosed, as after Close. keep is given the
// receipts of the messages the child took and the messages still queued,
// in the order they were sent, to keep for the child's next run (which
// puts them back with Restore and Requeue when it is woken with the
// answers); if it does, their receipts stay Queued, else they say
// Undelivered, as after Close. Sends wait while keep runs.
func (b *Box) Suspend(keep func(taken []Receipt, waiting []Message) bool) {
	b.note.Lock()
	defer b.note.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	var taken []Receipt
	for _, r := range b.known {
		if r.State == Delivered {
			taken = append(taken, *r)
		}
	}
	slices.SortFunc(taken, func(x, y Receipt) int { return x.Seq - y.Seq })
	if !keep(taken, slices.Clone(b.queue)) {
		for _, m := range b.queue {
			b.known[m.ID].State = Undelivered
		}
	}
	b.queue = nil
	b.trim()
}

// Withdraw records that a suspended child (Suspend) will not run again:
// the messages it kept say Undelivered.
func (b *Box) Withdraw() {
	b.note.Lock()
	defer b.note.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.known {
		if r.State == Queued {
			r.State = Undelivered
		}
	}
}

// add records a new message id, listed last, under b.mu.
func (b *Box) add(id string) *Receipt {
	b.seq++
	r := &Receipt{ID: id, Seq: b.seq}
	b.remember(r)
	b.order = append(b.order, id)
	return r
}

// trim drops from the list the oldest receipts of messages no longer
// queued, past MaxReceipts, under b.mu. The box still knows them by id.
func (b *Box) trim() {
	for len(b.order) > MaxReceipts {
		i := 0
		for i < len(b.order) && b.known[b.order[i]].State == Queued {
			i++
		}
		if i == len(b.order) {
			return
		}
		b.order = append(b.order[:i], b.order[i+1:]...)
		b.dropped++
	}
}

// Waiting returns the messages waiting, in the order they were sent,
// for the loop to record before it takes them (Take).
func (b *Box) Waiting() []Message {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Message(nil), b.queue...)
}

// Take marks the first n messages Waiting returned delivered before step
// and takes them out of the queue.
func (b *Box) Take(step, n int) {
	if b == nil || n == 0 {
		return
	}
	b.note.Lock()
	defer b.note.Unlock()
	b.mu.Lock()
	n = min(n, len(b.queue))
	var took []Receipt
	if b.notify.Delivered != nil {
		took = make([]Receipt, 0, n)
	}
	for _, m := range b.queue[:n] {
		r := b.known[m.ID]
		r.State, r.Step = Delivered, step
		if took != nil {
			took = append(took, *r)
		}
	}
	b.queue = append([]Message(nil), b.queue[n:]...)
	b.trim()
	b.mu.Unlock()
	if len(took) > 0 {
		b.notify.Delivered(took)
	}
	if b.changed != nil {
		b.changed()
	}
}

// Replayed marks messages an earlier run of the turn delivered before
// step as delivered, taking them out of the queue if they were sent again
// already: a send of them afterwards is answered with their receipt.
func (b *Box) Replayed(step int, msgs []Message) {
	if b == nil || len(msgs) == 0 {
		return
	}
	b.mu.Lock()
	for _, m := range msgs {
		r, ok := b.known[m.ID]
		if !ok {
			r = b.add(m.ID)
		}
		r.State, r.Step = Delivered, step
	}
	kept := b.queue[:0]
	for _, m := range b.queue {
		if b.known[m.ID].State == Queued {
			kept = append(kept, m)
		}
	}
	b.queue = kept
	b.trim()
	b.mu.Unlock()
	if b.changed != nil {
		b.changed()
	}
}

// Reached records that the child's loop is at step, having said last,
// spent usage (its children's included) and cost so far.
func (b *Box) Reached(step int, last string, usage provider.Usage, cost float64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.step = step
	if last != "" {
		b.last = last
	}
	b.usage, b.cost = usage, cost
	b.mu.Unlock()
	if b.changed != nil {
		b.changed()
	}
}

// Restore marks the messages of receipts, taken by a run of the child
// that an earlier run of the turn finished, as delivered where they say,
// taking them out of the queue if they were sent again already.
func (b *Box) Restore(receipts []Receipt) {
	if b == nil {
		return
	}
	for _, r := range receipts {
		b.Replayed(r.Step, []Message{{ID: r.ID}})
	}
}

// Began records that the child's loop begins step.
func (b *Box) Began(step int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.step = step
	b.mu.Unlock()
	// Told outside b.note: what it is told may fill the box (Requeue).
	b.note.Lock()
	began := b.notify.Began
	b.note.Unlock()
	if began != nil {
		began(step)
	}
}

// Progress is what the child's loop reported last.
type Progress struct {
	Step  int
	Last  string
	Usage provider.Usage
	Cost  float64
}

// Progress returns what the child's loop reported last, its usage and
// cost brought up to what its run has spent by now (Live): a child
// waiting on a long tool call, or parked, while its own children spend,
// says what they have spent since its last step.
func (b *Box) Progress() Progress {
	b.mu.Lock()
	p := Progress{Step: b.step, Last: b.last, Usage: b.usage, Cost: b.cost}
	live := b.live
	b.mu.Unlock()
	if live != nil {
		u, c := live()
		p.Usage, p.Cost = usage.Most(p.Usage, u), max(p.Cost, c)
	}
	return p
}

// Live sets what the child's run has spent by now, read by Progress (nil:
// only what its loop reported at its last step).
func (b *Box) Live(spent func() (provider.Usage, float64)) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.live = spent
	b.mu.Unlock()
}

// Receipts returns the receipts of the last MaxReceipts messages (every
// one still queued among them), in the order sent, and how many older
// ones are left out.
func (b *Box) Receipts() (rs []Receipt, dropped int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Receipt, len(b.order))
	for i, id := range b.order {
		out[i] = *b.known[id]
	}
	return out, b.dropped
}

// Taken returns the receipts of every message delivered, listed or not,
// in the order sent.
func (b *Box) Taken() []Receipt {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Receipt
	for _, r := range b.known {
		if r.State == Delivered {
			out = append(out, *r)
		}
	}
	slices.SortFunc(out, func(x, y Receipt) int { return x.Seq - y.Seq })
	return out
}

// Receipt returns where the message id stands.
func (b *Box) Receipt(id string) (Receipt, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.known[id]
	if !ok {
		return Receipt{}, false
	}
	return *r, true
}

type key struct{}

// With returns ctx carrying b, for the next run of a loop under it.
func With(ctx context.Context, b *Box) context.Context { return context.WithValue(ctx, key{}, b) }

// From returns the box ctx carries, or nil.
func From(ctx context.Context) *Box {
	b, _ := ctx.Value(key{}).(*Box)
	return b
}
