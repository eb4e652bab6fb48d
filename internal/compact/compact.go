// Package compact holds the parts of compaction that do not depend on how a
// run is made: when a conversation kept between runs is due, which of its
// turns a summary replaces, the request that asks for the summary, and the
// conversation with the summary in their place. agent.React compacts with
// them, and so, through agent/runtime, does another runtime's resident.
package compact

import (
	"strconv"
	"strings"

	"github.com/deputy-go/deputy/internal/textcap"
	"github.com/deputy-go/deputy/provider"
)

// The messages a summary stands in for the turns it replaced. Header
// starts the user message that carries the summary, so that the next
// compaction finds it and folds it into the new one.
const (
	Header = "[Summary of the conversation so far: earlier turns were compacted into it.]\n\n"
	Ack    = "Understood: I will take that summary as what was said before."
)

// Bounds are a compaction policy's bounds, every one set (agent.Compaction
// with its defaults applied).
type Bounds struct {
	MaxTokens       int64
	MaxMessages     int
	MaxBytes        int64
	KeepTurns       int
	MaxSummaryBytes int
	SummaryPrompt   string
}

// MsgBytes is what a message weighs in the estimate.
func MsgBytes(m provider.Message) int64 {
	n := len(m.Content) + len(m.ToolCallID)
	for _, c := range m.ToolCalls {
		n += len(c.ID) + len(c.Name) + len(c.Arguments)
	}
	return int64(n)
}

// MsgsBytes is MsgBytes summed over msgs.
func MsgsBytes(msgs []provider.Message) int64 {
	var n int64
	for _, m := range msgs {
		n += MsgBytes(m)
	}
	return n
}

// TokenBound is the estimate past which a request is compacted: MaxTokens,
// or three quarters of the window if lower (window 0: unknown).
func (b Bounds) TokenBound(window int64) int64 {
	t := b.MaxTokens
	if w := window * 3 / 4; w > 0 && w < t {
		t = w
	}
	return t
}

// Room is how much the kept turns may weigh: half a bound.
func (b Bounds) Room(window int64) int64 {
	return min(b.MaxBytes, 4*b.TokenBound(window)) / 2
}

// SummaryEnd returns where the summary at the start of hist, if any, ends.
func SummaryEnd(hist []provider.Message) int {
	if len(hist) >= 2 && strings.HasPrefix(hist[0].Content, Header) {
		return 2
	}
	return 0
}

// Cut returns where the older turns of hist end, the kept ones weighing at
// most room bytes (0: nothing to fold).
func (b Bounds) Cut(hist []provider.Message, room int64) int {
	first := SummaryEnd(hist) // a compaction does not fold a bare summary
	roomMsgs := b.MaxMessages / 2
	cut, turns := len(hist), 0
	var kept int64
	for i := len(hist) - 1; i >= first && turns < b.KeepTurns; i-- {
		kept += MsgBytes(hist[i])
		if kept > room || len(hist)-i > roomMsgs {
			break
		}
		if hist[i].Role == provider.RoleUser {
			cut, turns = i, turns+1
		}
	}
	if cut <= first {
		return 0
	}
	return cut
}

// Due reports whether hist, a conversation kept between runs, passes a
// bound, its tokens estimated at four bytes each; window is the model's
// context window in tokens (0: unknown).
func (b Bounds) Due(hist []provider.Message, window int64) bool {
	n := MsgsBytes(hist)
	return (n+3)/4 > b.TokenBound(window) || len(hist) > b.MaxMessages || n > b.MaxBytes
}

// Plan returns how many of the first messages of hist a compaction folds
// into a summary: whole turns before the latest KeepTurns, fewer kept
// when they would fill more than half a bound, never an earlier summary
// alone. Zero means there is nothing to fold.
func (b Bounds) Plan(hist []provider.Message, window int64) int {
	return b.Cut(hist, b.Room(window))
}

// SummaryRequest returns the model request that asks for the summary of
// older, the messages Plan chose, for a model named model.
func (b Bounds) SummaryRequest(older []provider.Message, model string, window int64) provider.Request {
	return provider.Request{
		Model:     model,
		System:    b.SummaryPrompt,
		Messages:  []provider.Message{provider.UserMessage(Transcript(older, int(min(4*b.TokenBound(window), 1<<22))))},
		MaxTokens: b.MaxSummaryBytes / 3, // a token is three or four bytes of text
	}
}

// Apply returns msgs with its first cut messages replaced by summary (cut
// to MaxSummaryBytes): a user message that carries it and an assistant
// acknowledgement, or nothing when summary is empty. msgs is not changed.
func (b Bounds) Apply(msgs []provider.Message, cut int, summary string) []provider.Message {
	out := make([]provider.Message, 0, 2+len(msgs)-cut+4)
	if summary = b.CapSummary(summary); summary != "" {
		out = append(out, provider.UserMessage(Header+summary), provider.AssistantMessage(Ack))
	}
	return append(out, msgs[cut:]...)
}

// CapSummary trims text and cuts it so that with its header it fits
// MaxSummaryBytes.
func (b Bounds) CapSummary(text string) string {
	return textcap.Cap(strings.TrimSpace(text), b.MaxSummaryBytes-len(Header))
}

// Transcript writes msgs as text for the summarizer to read, in at most
// about limit bytes: each message is cut to 4 KiB, and when they are still
// too long the oldest after the first (an earlier summary, if any) are
// left out, and the transcript says how many.
func Transcript(msgs []provider.Message, limit int) string {
	const perMessage = 4 << 10
	lines := make([]string, 0, len(msgs))
	total := 0
	for _, m := range msgs {
		var b strings.Builder
		switch m.Role {
		case provider.RoleUser:
			b.WriteString("User: ")
			b.WriteString(m.Content)
		case provider.RoleAssistant:
			b.WriteString("Assistant: ")
			b.WriteString(m.Content)
			for _, call := range m.ToolCalls {
				b.WriteString("\n(called the tool " + call.Name + " with " + string(call.Arguments) + ")")
			}
		case provider.RoleTool:
			if m.IsError {
				b.WriteString("Tool error: ")
			} else {
				b.WriteString("Tool result: ")
			}
			b.WriteString(m.Content)
		default:
			continue
		}
		line := textcap.Cap(b.String(), perMessage)
		lines = append(lines, line)
		total += len(line) + 2
	}
	dropped := 0
	for total > limit && len(lines)-dropped > 2 {
		total -= len(lines[1+dropped]) + 2
		dropped++
	}
	if dropped > 0 {
		note := "[" + strconv.Itoa(dropped) + " earlier messages left out]"
		lines = append(lines[:1], append([]string{note}, lines[1+dropped:]...)...)
	}
	return "The conversation to summarize:\n\n" + strings.Join(lines, "\n\n")
}
