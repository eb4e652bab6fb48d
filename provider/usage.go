package provider

import "fmt"

// Usage counts the work done by a model: tokens in and out and requests made.
//
// The zero value is no usage. Usage is a value: Add returns the sum and
// leaves both operands unchanged.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CacheReadTokens and CacheWriteTokens are the part of InputTokens read
	// from or written to a prompt cache, on providers that report it.
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	Requests         int64 `json:"requests"`
}

// Add returns the sum of u and o.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		InputTokens:      u.InputTokens + o.InputTokens,
		OutputTokens:     u.OutputTokens + o.OutputTokens,
		CacheReadTokens:  u.CacheReadTokens + o.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens + o.CacheWriteTokens,
		Requests:         u.Requests + o.Requests,
	}
}

// Tokens returns input plus output tokens.
func (u Usage) Tokens() int64 { return u.InputTokens + u.OutputTokens }

// IsZero reports whether u counts nothing.
func (u Usage) IsZero() bool { return u == Usage{} }

// String renders u compactly, e.g. "3 req, 120 in, 40 out".
func (u Usage) String() string {
	return fmt.Sprintf("%d req, %d in, %d out", u.Requests, u.InputTokens, u.OutputTokens)
}

// ModelUsage is the usage of one model of one provider.
type ModelUsage struct {
	// Provider is the provider's name (Namer), or "" when it has none.
	Provider string `json:"provider,omitempty"`
	// Model is the model that answered, or "" when nobody said.
	Model string `json:"model,omitempty"`
	Usage Usage  `json:"usage"`
	// Cost is what Usage cost in US dollars, at the prices the run was
	// given (agent.WithPrices); zero when it was given none, or none for
	// this model.
	Cost float64 `json:"cost,omitempty"`
	// CacheSaved is what the prompt cache saved on Usage in US dollars at
	// the same prices (Price.Saved): cached input at its own price, cache
	// writes at theirs. It is negative when writes cost more than reads
	// saved; zero without a price, or without cached tokens.
	CacheSaved float64 `json:"cache_saved,omitempty"`
}

// Add returns the sum of m and o, under m's provider and model.
func (m ModelUsage) Add(o ModelUsage) ModelUsage {
	m.Usage = m.Usage.Add(o.Usage)
	m.Cost += o.Cost
	m.CacheSaved += o.CacheSaved
	return m
}
