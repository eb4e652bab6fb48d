package fake

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"slices"
	"strconv"

	"github.com/deputy-go/deputy/provider"
)

// Cache is a way of accounting for a provider's prompt cache, for
// PromptCache.
type Cache int

// The prompt caches the provider can account for. Both count tokens the
// way Usage does (one per four bytes) and see a request as blocks: the
// tools, the system prompt, then each message (a tool call counts as a
// block of its own). Neither expires entries: a test's calls are seconds
// apart, well within the vendors' lifetimes of five minutes and more.
const (
	// NoCache: no prompt cache (the default).
	NoCache Cache = iota
	// AnthropicCache accounts as Anthropic documents for the breakpoints
	// provider/anthropic marks: after the system prompt (or the tools),
	// at the end of the shared messages (Request.SharedPrefix), at the
	// end of the previous user turn and at the end of the conversation. A breakpoint reads the longest prefix written before
	// that ends on a block boundary at most 20 blocks before it, and
	// writes its own prefix; a prefix under 1024 tokens is not cached.
	// CacheReadTokens are the tokens read, CacheWriteTokens those written.
	AnthropicCache
	// OpenAICache accounts as OpenAI documents for its automatic prompt
	// caching: a prompt of 1024 tokens or more reads the longest prefix of
	// an earlier prompt with the same CacheKey, in steps of 128 tokens
	// from 1024. CacheReadTokens are the tokens read; nothing is reported
	// as written.
	OpenAICache
)

// Rules of the caches, from the vendors' documentation.
const (
	cacheMinTokens      = 1024 // the shortest prefix either caches
	openAICacheStep     = 128  // OpenAI caches prefixes in steps of this
	anthropicLookback   = 20   // blocks a breakpoint looks back for a hit
	cacheEntriesLimit   = 1 << 16
	cacheBytesPerToken  = 4
	cacheBlockSeparator = 0x1e
)

// PromptCache makes the provider account for a prompt cache of the given
// kind: the synthetic usage of each reply (not one set with WithUsage or
// computed by Respond) reports CacheReadTokens, and CacheWriteTokens where
// the vendor reports them, as part of InputTokens. It returns p.
func (p *Provider) PromptCache(kind Cache) *Provider {
	p.mu.Lock()
	p.cacheKind = kind
	p.cached = nil
	p.mu.Unlock()
	return p
}

// block is one block of a request: where it ends, in bytes from the
// start of the prompt, the hash of the prompt up to its end, and whether
// it ends a user turn (a user message or a tool result followed by no
// other tool result).
type block struct {
	end      int
	sum      [sha256.Size]byte
	userTurn bool
}

// blocks splits req into blocks, in the order the vendors lay a prompt out.
func blocks(req provider.Request) []block {
	h := sha256.New()
	var out []block
	size := 0
	write := func(s string) {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	// add ends a block made of label (hashed, not counted, as Usage does
	// not count roles and ids) and parts (hashed and counted).
	add := func(userTurn bool, label string, parts ...string) {
		write(label)
		for _, s := range parts {
			write(s)
			size += len(s)
		}
		h.Write([]byte{cacheBlockSeparator})
		out = append(out, block{end: size, sum: sum(h), userTurn: userTurn})
	}
	for _, t := range req.Tools {
		add(false, "tool", t.Name, t.Description, string(t.Parameters))
	}
	if req.System != "" {
		add(false, "system", req.System)
	}
	for i, m := range req.Messages {
		endsTurn := i == len(req.Messages)-1 || req.Messages[i+1].Role == provider.RoleAssistant
		switch m.Role {
		case provider.RoleAssistant:
			add(false, string(m.Role), m.Content)
			for _, c := range m.ToolCalls {
				add(false, "call "+c.ID, c.Name, string(c.Arguments))
			}
		case provider.RoleTool:
			add(endsTurn, "result "+m.ToolCallID+" "+strconv.FormatBool(m.IsError), m.Content)
		default:
			add(endsTurn, string(m.Role), m.Content)
		}
	}
	return out
}

// blockCount is how many blocks msgs make (see blocks).
func blockCount(msgs []provider.Message) int {
	n := 0
	for _, m := range msgs {
		n++
		if m.Role == provider.RoleAssistant {
			n += len(m.ToolCalls)
		}
	}
	return n
}

func sum(h hash.Hash) (s [sha256.Size]byte) {
	h.Sum(s[:0])
	return s
}

// cacheUsage accounts for req in the prompt cache and returns the tokens
// read from and written to it. Call it with p.mu held.
func (p *Provider) cacheUsage(req provider.Request) (read, write int64) {
	if p.cacheKind == NoCache {
		return 0, 0
	}
	if p.cached == nil {
		p.cached = map[cacheEntry]bool{}
	}
	bs := blocks(req)
	if len(bs) == 0 {
		return 0, 0
	}
	tokens := func(b block) int64 { return int64(b.end / cacheBytesPerToken) }
	key := req.CacheKey
	if p.cacheKind == AnthropicCache {
		key = "" // Anthropic's cache is found by the prefix alone
	}
	store := func(b block) {
		if len(p.cached) < cacheEntriesLimit {
			p.cached[cacheEntry{key, b.sum}] = true
		}
	}
	switch p.cacheKind {
	case OpenAICache:
		var hit int64
		for _, b := range bs {
			if p.cached[cacheEntry{key, b.sum}] {
				hit = tokens(b)
			}
			if tokens(b) >= cacheMinTokens {
				store(b)
			}
		}
		if hit < cacheMinTokens {
			return 0, 0
		}
		return cacheMinTokens + (hit-cacheMinTokens)/openAICacheStep*openAICacheStep, 0
	case AnthropicCache:
		// The breakpoints provider/anthropic marks, in order.
		var points []int
		msgStart := len(req.Tools) // the first message's block
		if req.System != "" {
			points = append(points, msgStart)
			msgStart++
		} else if msgStart > 0 {
			points = append(points, msgStart-1)
		}
		lastTurn := len(bs) - 1
		if n := req.SharedPrefix; n > 0 && n <= len(req.Messages) {
			// The end of the shared messages (a context fork's parent's
			// conversation): the block their last one ends.
			points = append(points, msgStart+blockCount(req.Messages[:n])-1)
		}
		for i := lastTurn - 1; i >= msgStart; i-- {
			if bs[i].userTurn {
				points = append(points, i)
				break
			}
		}
		points = append(points, lastTurn)
		slices.Sort(points)
		points = slices.Compact(points)
		var done int64 // tokens up to the last breakpoint already counted
		for _, at := range points {
			if tokens(bs[at]) < cacheMinTokens {
				continue
			}
			// The longest prefix cached before, ending at most 20 blocks
			// before the breakpoint.
			var hit int64
			for j := at; j >= 0 && j >= at-anthropicLookback; j-- {
				if p.cached[cacheEntry{key, bs[j].sum}] {
					hit = tokens(bs[j])
					break
				}
			}
			if hit > done {
				read += hit - done
				done = hit
			}
			if t := tokens(bs[at]); t > done {
				write += t - done
				done = t
			}
			store(bs[at])
		}
		return read, write
	}
	return 0, 0
}

// cacheEntry is a cached prefix: the key it was cached under and its hash.
type cacheEntry struct {
	key string
	sum [sha256.Size]byte
}
