package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/deputy-go/deputy/internal/compact"
	"github.com/deputy-go/deputy/internal/errcode"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
)

// Defaults of compaction (Compaction's zero fields).
const (
	DefaultCompactTokens   = 64_000  // input tokens of a request
	DefaultCompactMessages = 1_000   // messages of the conversation
	DefaultCompactBytes    = 1 << 20 // bytes of its text
	DefaultKeepTurns       = 4       // latest user turns kept word for word
	DefaultMaxSummaryBytes = 8 << 10 // a longer summary is cut
)

// DefaultSummaryPrompt is the system prompt of the model call that
// summarizes the older turns of a conversation.
const DefaultSummaryPrompt = `You compact a conversation between a user and an assistant so that the assistant can carry on without it.
Write a summary the assistant will read instead of the turns below: every fact, figure, name, decision, preference and instruction the user gave; what the assistant answered, found or promised; tool results that still matter; and what is unfinished.
Keep an earlier summary's content unless a later turn replaced it. Be concise and exact: no commentary, no greeting. Write it as notes, not as a dialogue.`

// Errors of compaction, wrapped with the agent's name and the cause:
// ErrCompaction when a summary could not be made (the conversation is left
// as it was), ErrContextWindow when a request does not fit the window
// (WithContextWindow) even after compaction, and was not sent.
var (
	ErrCompaction    = errcode.New("compaction_failed", "agent: compacting the conversation failed")
	ErrContextWindow = errcode.New("context_window", "agent: request does not fit the context window")
)

// Compaction says when a React shortens the conversation it keeps between
// runs, and how (the zero value is every React's default). Before a call
// whose estimated input passes MaxTokens (or three quarters of the window),
// when the conversation passes MaxMessages or MaxBytes, or when the provider
// refuses a request as too long, the turns before the latest KeepTurns
// become a summary, folded into the next one. The run's own turn, the system
// prompt and a fork's inherited prefix (unless over the window) are never
// folded. A failed summary fails the run with ErrCompaction, the
// conversation as it was; a journaled one is replayed. See docs/providers.md.
type Compaction struct {
	// MaxTokens, MaxMessages and MaxBytes are the bounds (see Compaction);
	// KeepTurns the user turns kept word for word. Zero means the default.
	MaxTokens   int64
	MaxMessages int
	MaxBytes    int64
	KeepTurns   int
	// Summarizer and SummaryModel write the summary: nil and "" mean the
	// agent's own provider and model (or the summarizer's default).
	Summarizer   provider.Provider
	SummaryModel string
	// SummaryPrompt is the summary call's system prompt (DefaultSummaryPrompt),
	// and MaxSummaryBytes its bound (DefaultMaxSummaryBytes).
	SummaryPrompt   string
	MaxSummaryBytes int
	// Summarize, when set, writes the summary instead: given the turns to fold
	// in, an earlier summary first, it returns the summary; an empty one drops
	// the turns (a sliding window). It must honour ctx.
	Summarize func(ctx context.Context, older []provider.Message) (string, error)
}

// WithCompaction sets the policy that keeps the agent's conversation
// within bounds (see Compaction); without it the default policy applies.
func WithCompaction(c Compaction) Option {
	return func(r *React) error {
		switch {
		case c.MaxTokens < 0, c.MaxMessages < 0, c.MaxBytes < 0, c.KeepTurns < 0, c.MaxSummaryBytes < 0:
			return fmt.Errorf("%w: compaction with a negative bound (%+d tokens, %+d messages, %+d bytes, %+d turns, %+d summary bytes): use 0 for the default or a positive number",
				ErrInvalidOption, c.MaxTokens, c.MaxMessages, c.MaxBytes, c.KeepTurns, c.MaxSummaryBytes)
		case c.Summarize != nil && (c.Summarizer != nil || c.SummaryModel != "" || c.SummaryPrompt != ""):
			return fmt.Errorf("%w: compaction with both Summarize and a summary model: set one of them", ErrInvalidOption)
		case c.MaxSummaryBytes > 0 && c.MaxSummaryBytes < 256:
			return fmt.Errorf("%w: compaction with MaxSummaryBytes %d: a summary needs at least 256 bytes", ErrInvalidOption, c.MaxSummaryBytes)
		}
		c = c.withDefaults()
		r.compaction = &c
		return nil
	}
}

// WithoutCompaction keeps the whole conversation, for an agent whose history
// is bounded some other way (WithHistoryLimit, or fresh runs).
func WithoutCompaction() Option {
	return func(r *React) error {
		r.compaction = nil
		return nil
	}
}

// WithContextWindow gives the model's window in tokens: compaction starts at
// three quarters of it, and a request that cannot fit fails with
// ErrContextWindow unsent.
func WithContextWindow(tokens int64) Option {
	return func(r *React) error {
		if tokens <= 0 {
			return fmt.Errorf("%w: context window of %d tokens: give the model's window, such as 128000", ErrInvalidOption, tokens)
		}
		r.window = tokens
		return nil
	}
}

// bounds returns c's bounds, for the pieces of internal/compact; c has its
// defaults.
func (c Compaction) bounds() compact.Bounds {
	return compact.Bounds{MaxTokens: c.MaxTokens, MaxMessages: c.MaxMessages, MaxBytes: c.MaxBytes,
		KeepTurns: c.KeepTurns, MaxSummaryBytes: c.MaxSummaryBytes, SummaryPrompt: c.SummaryPrompt}
}

// defaultCompaction is the policy of every React not given one. Agents
// share it, as nothing writes to an agent's Compaction once it is set: a
// copy for each agent cost a FromFactory delegation, which builds one, an
// allocation and 96 of its bytes (BenchmarkDelegation in subagent).
var defaultCompaction = Compaction{}.withDefaults()

func (c Compaction) withDefaults() Compaction {
	if c.MaxTokens == 0 {
		c.MaxTokens = DefaultCompactTokens
	}
	if c.MaxMessages == 0 {
		c.MaxMessages = DefaultCompactMessages
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultCompactBytes
	}
	if c.KeepTurns == 0 {
		c.KeepTurns = DefaultKeepTurns
	}
	if c.MaxSummaryBytes == 0 {
		c.MaxSummaryBytes = DefaultMaxSummaryBytes
	}
	if c.SummaryPrompt == "" && c.Summarize == nil {
		c.SummaryPrompt = DefaultSummaryPrompt
	}
	return c
}

// add appends m to the run's conversation.
func (s *runState) add(m provider.Message) {
	s.msgs = append(s.msgs, m)
	s.bytes += compact.MsgBytes(m)
}

// estimate returns the estimated input tokens of the next request, whose
// system prompt and tool definitions weigh fixed bytes.
func (s *runState) estimate(fixed int64) int64 {
	if s.reported > 0 {
		return s.reported + (s.bytes-s.reportedBytes+3)/4
	}
	return (fixed + s.bytes + 3) / 4
}

// noteReply remembers what the provider reported for the reply just
// added, the base of the next estimate.
func (s *runState) noteReply(u provider.Usage) {
	if u.InputTokens > 0 {
		s.reported, s.reportedBytes = u.InputTokens+u.OutputTokens, s.bytes
	}
}

// fit compacts the conversation before a request when it is due, or when
// forced (the provider said the last request was too long), and checks
// the request against the context window.
func (s *runState) fit(step int, fixed int64, forced bool) error {
	r := s.r
	est := s.estimate(fixed)
	if s.compactionDue(est, forced) {
		if err := s.compact(step, forced); err != nil {
			return err
		}
		est = s.estimate(fixed)
		if err := s.checkLimit(); err != nil { // the summary cost tokens too
			return err
		}
	}
	if w := r.window; w > 0 && est > w {
		how := "give a smaller task, or a model with a larger window (WithContextWindow)"
		if r.compaction == nil {
			how = "let the agent compact its conversation (leave WithoutCompaction out), " + how
		}
		return fmt.Errorf("%w: about %d tokens, the window is %d, and the run's own turn cannot be compacted: %s", ErrContextWindow, est, w, how)
	}
	return nil
}

// compactionDue says whether the conversation is compacted before a
// request estimated at est tokens.
func (s *runState) compactionDue(est int64, forced bool) bool {
	r, c := s.r, s.r.compaction
	switch {
	case c == nil || s.nothingToCompact:
		return false
	case forced:
		return true
	case s.fork != nil:
		// A context fork's conversation before its run is the request its
		// parent sent, whose length was the parent's to bound: sent again
		// as it is, it is read from the provider's cache, where a summary
		// of it would cost a model call and the cache of every token after
		// it. It is compacted only when the request cannot be sent.
		return r.window > 0 && est > r.window
	}
	return est > c.bounds().TokenBound(r.window) || len(s.msgs) > c.MaxMessages || s.bytes > c.MaxBytes
}

// compact replaces the older turns of the conversation before the run
// with a summary. It does nothing when there is nothing to fold in.
func (s *runState) compact(step int, forced bool) error {
	c := s.r.compaction
	hist := s.msgs[:s.start]
	b := c.bounds()
	room := b.Room(s.r.window)
	if forced {
		// The provider found the request too long: keep half of what
		// the last compaction kept, at most.
		room = min(room, compact.MsgsBytes(hist[compact.SummaryEnd(hist):])/2)
	}
	cut := b.Cut(hist, room)
	if cut == 0 {
		s.nothingToCompact = true
		return nil
	}
	older := hist[:cut]
	summary, err := s.summary(step, older)
	if err != nil {
		return fmt.Errorf("%w: folding %d messages into a summary: %w; the conversation is as it was before this run: check the summarizing model (Compaction.Summarizer, SummaryModel) or raise the bounds", ErrCompaction, len(older), err)
	}
	s.callIDs.keep(s.msgs) // the ids of the calls folded away stay taken
	msgs := b.Apply(s.msgs, cut, summary)
	s.start += len(msgs) - len(s.msgs)
	s.msgs = msgs
	s.bytes = compact.MsgsBytes(msgs)
	s.reported, s.reportedBytes = 0, 0 // no report covers the new conversation
	s.compactions++
	if l := s.r.logger; l != nil && l.Enabled(s.ctx, slog.LevelInfo) {
		l.LogAttrs(s.ctx, slog.LevelInfo, "deputy: conversation compacted", s.attrs(
			slog.Int("step", step), slog.Int("folded", len(older)), slog.Int("kept", len(msgs)), slog.Int("summary_bytes", len(summary)))...)
	}
	return nil
}

// summary returns the summary of older: recorded in the run's journal, or
// made now (and recorded).
func (s *runState) summary(step int, older []provider.Message) (string, error) {
	var key string
	if s.journal != nil {
		key = s.summaryKey(step)
		s.summariesRead[key] = true
		if resp, ok := s.journal.answer(key); ok {
			s.respendSummary(resp)
			return resp.Message.Content, nil
		}
	}
	text, paid, over, err := s.summarize(older)
	if err != nil {
		if s.journal != nil {
			s.journal.recordOver(s.ctx, key, over)
		}
		return "", err
	}
	if s.journal != nil {
		resp := provider.Response{Message: provider.AssistantMessage(text), Usage: paid.Usage, Model: paid.Model}
		if err := s.journal.recordAnswer(context.WithoutCancel(s.ctx), key, resp, resp.Message, false, unpaid{}, paid, over); err != nil {
			return "", err
		}
	}
	return text, nil
}

// summaryKey is the journal key of the run's next compaction, made in
// step: one key per compaction of the run, so that a step that compacts
// twice (the provider refused the first result as too long) records two
// summaries.
func (s *runState) summaryKey(step int) string {
	return journal.SummaryKey(s.journal.stepKey(step), s.compactions+1)
}

// summarize makes the summary of older and returns it with what it cost,
// as the run's ledger counted it, and the model that wrote it ("" for
// Summarize), and what its call passed the run's limits by (over).
func (s *runState) summarize(older []provider.Message) (text string, paid provider.ModelUsage, over overdrawn, err error) {
	c := s.r.compaction
	defer func() {
		if p := recover(); p != nil {
			text, paid, err = "", provider.ModelUsage{}, fmt.Errorf("the summarizer panicked: %v", p)
		}
	}()
	var usage provider.Usage
	if c.Summarize != nil {
		text, err = c.Summarize(s.ctx, older)
		if err == nil {
			err = s.ctx.Err()
		}
		if err != nil {
			return "", provider.ModelUsage{Usage: usage}, over, err
		}
		return c.bounds().CapSummary(text), paid, over, nil
	}
	p, model := c.Summarizer, c.SummaryModel
	if p == nil {
		p = s.r.p
		if model == "" {
			model = s.r.model
		}
	}
	req := c.bounds().SummaryRequest(older, model, s.r.window)
	req.CacheKey = s.cacheKey + "/summary"
	name := ""
	if n, ok := p.(provider.Namer); ok {
		name = n.Name()
	}
	// The model that answers a request naming none is the summarizing
	// provider's default: the summary is reserved and priced at it, as
	// the agent's own calls are (spanIdentity), not at the dearest price.
	answering := model
	if m, ok := p.(modeler); ok && answering == "" {
		answering = m.Model()
	}
	var od *run.Overdraft
	if lim := s.limits(); lim.tokens || lim.cost {
		// The summary is reserved like any call: its input, and its
		// length as its output bound; when its worst case does not fit,
		// it takes its turn as plan has a call take it.
		bytes := int64(len(req.System) + len(req.Messages[0].Content))
		est := (bytes + 3) / 4
		bound := int64(req.MaxTokens)
		out := s.room(lim, est, name, answering, false)
		if out >= 1 && !s.covers(lim, bytes, min(bound, out), name, answering) {
			if lim, od, err = s.overdrawn(); err != nil {
				return "", provider.ModelUsage{Usage: usage}, over, err
			}
			defer od.Done(0, 0) // when not ended below
			out = s.room(lim, est, name, answering, false)
		}
		if out < 1 {
			return "", provider.ModelUsage{Usage: usage}, over, s.noRoom(est, lim)
		}
		req.MaxTokens = int(min(bound, out))
	}
	if s.policy != nil {
		var err error
		if req, err = s.guardModel(req); err != nil {
			return "", provider.ModelUsage{Usage: usage}, over, err
		}
	}
	resp, err := p.Complete(s.ctx, req)
	usage = resp.Usage
	s.usage = s.usage.Add(usage)
	if !usage.IsZero() {
		paid = s.spend(name, cmp.Or(resp.Model, answering), usage)
	} else {
		paid.Model = answering
	}
	over.Tokens, over.Dollars = od.Done(usage.Tokens(), paid.Cost)
	if err != nil {
		return "", provider.ModelUsage{Usage: usage}, over, fmt.Errorf("the summary's model call: %w", err)
	}
	text = strings.TrimSpace(resp.Message.Content)
	if text == "" {
		return "", provider.ModelUsage{Usage: usage}, over, errors.New("the summarizer answered with no text (stop reason " + strconv.Quote(string(resp.StopReason)) + "): check its model and prompt")
	}
	return c.bounds().CapSummary(text), paid, over, nil
}
