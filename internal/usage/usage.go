// Package usage is the count-by-count arithmetic on provider.Usage that
// the ledger's parts share: what one count has that another does not, and
// the larger of two.
package usage

import "github.com/deputy-go/deputy/provider"

// Less returns a less b, count by count, none below zero: what a counts
// that b does not.
func Less(a, b provider.Usage) provider.Usage {
	return provider.Usage{
		InputTokens:      max(a.InputTokens-b.InputTokens, 0),
		OutputTokens:     max(a.OutputTokens-b.OutputTokens, 0),
		CacheReadTokens:  max(a.CacheReadTokens-b.CacheReadTokens, 0),
		CacheWriteTokens: max(a.CacheWriteTokens-b.CacheWriteTokens, 0),
		Requests:         max(a.Requests-b.Requests, 0),
	}
}

// Most returns the larger of a and b, count by count.
func Most(a, b provider.Usage) provider.Usage {
	return provider.Usage{
		InputTokens:      max(a.InputTokens, b.InputTokens),
		OutputTokens:     max(a.OutputTokens, b.OutputTokens),
		CacheReadTokens:  max(a.CacheReadTokens, b.CacheReadTokens),
		CacheWriteTokens: max(a.CacheWriteTokens, b.CacheWriteTokens),
		Requests:         max(a.Requests, b.Requests),
	}
}
