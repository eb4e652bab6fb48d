package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// Price is what a model charges, in US dollars per token, and how large
// its context window is. deputy ships no prices: they change, and differ
// by contract; give your own, or read a table kept elsewhere (ReadPrices).
type Price struct {
	// Input is the price of an input token that no cache served.
	Input float64
	// Output is the price of an output token.
	Output float64
	// CacheRead is the price of an input token read from the prompt
	// cache; zero means Input's.
	CacheRead float64
	// CacheWrite is the price of an input token written to the prompt
	// cache; zero means Input's.
	CacheWrite float64
	// Window is the model's context window in tokens; zero when unknown.
	Window int64
}

// Cost returns what u cost at p, in US dollars. Input tokens read from or
// written to the cache (part of u.InputTokens) are priced as such.
func (p Price) Cost(u Usage) float64 {
	read, write := p.CacheRead, p.CacheWrite
	if read == 0 {
		read = p.Input
	}
	if write == 0 {
		write = p.Input
	}
	plain := max(u.InputTokens-u.CacheReadTokens-u.CacheWriteTokens, 0)
	return float64(plain)*p.Input + float64(u.CacheReadTokens)*read + float64(u.CacheWriteTokens)*write + float64(u.OutputTokens)*p.Output
}

// Saved returns what the prompt cache saved on u at p, in US dollars:
// what u would have cost with every input token at Input, less what it
// cost (Cost). Tokens read from the cache save Input less CacheRead each;
// tokens written to it cost CacheWrite less Input more each where a vendor
// charges more for a write (Anthropic), so a call that wrote more than it
// read can save less than nothing.
func (p Price) Saved(u Usage) float64 {
	uncached := u
	uncached.CacheReadTokens, uncached.CacheWriteTokens = 0, 0
	return p.Cost(uncached) - p.Cost(u)
}

// Prices is a price table: a Price per provider and model. Build one with
// NewPrices or ReadPrices. It is safe for concurrent use (it does not
// change once built).
type Prices struct {
	byProvider map[[2]string]Price // provider, model
	byModel    map[string]Price
}

// NewPrices returns a table of the prices given, keyed by model name as a
// provider reports it (Response.Model), or by "provider/model" to tell
// apart one model name at two providers. A negative or non-finite price or
// window is an error naming the model.
func NewPrices(prices map[string]Price) (*Prices, error) {
	t := &Prices{byProvider: map[[2]string]Price{}, byModel: map[string]Price{}}
	for name, p := range prices {
		if err := p.check(); err != nil {
			return nil, fmt.Errorf("provider: price of %q: %w", name, err)
		}
		t.byModel[name] = p
		if prov, model, ok := strings.Cut(name, "/"); ok {
			t.byProvider[[2]string{prov, model}] = p
		}
	}
	return t, nil
}

func (p Price) check() error {
	for _, v := range []float64{p.Input, p.Output, p.CacheRead, p.CacheWrite} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%v dollars a token: give a price of zero or more", v)
		}
	}
	if p.Window < 0 {
		return fmt.Errorf("a window of %d tokens: give zero (unknown) or more", p.Window)
	}
	return nil
}

// Lookup returns the price of model at provider (a Namer's name, or "").
// The entry "provider/model" wins over "model".
func (t *Prices) Lookup(provider, model string) (Price, bool) {
	if t == nil {
		return Price{}, false
	}
	if p, ok := t.byProvider[[2]string{provider, model}]; ok {
		return p, true
	}
	p, ok := t.byModel[model]
	return p, ok
}

// Dearest returns the highest price of each kind in the table (together
// they need not be one model's): the most a token of a call can cost when
// it is not yet known which of the table's models answers it. A nil or
// empty table returns the zero Price and false.
func (t *Prices) Dearest() (Price, bool) {
	var d Price
	if t == nil || len(t.byModel)+len(t.byProvider) == 0 {
		return d, false
	}
	for _, p := range t.byModel {
		d = dearer(d, p)
	}
	for _, p := range t.byProvider {
		d = dearer(d, p)
	}
	return d, true
}

func dearer(a, b Price) Price {
	return Price{Input: max(a.Input, b.Input), Output: max(a.Output, b.Output), CacheRead: max(a.CacheRead, b.CacheRead), CacheWrite: max(a.CacheWrite, b.CacheWrite)}
}

// Cost returns what the usage cost, in US dollars, and the models of it
// that the table has no price for (their usage counted as nothing).
func (t *Prices) Cost(usage ...ModelUsage) (dollars float64, unpriced []string) {
	for _, mu := range usage {
		p, ok := t.Lookup(mu.Provider, mu.Model)
		if !ok {
			if !mu.Usage.IsZero() {
				name := mu.Model
				if mu.Provider != "" {
					name = mu.Provider + "/" + mu.Model
				}
				unpriced = append(unpriced, name)
			}
			continue
		}
		dollars += p.Cost(mu.Usage)
	}
	return dollars, unpriced
}

// Saved returns what the prompt cache saved on the usage, in US dollars,
// at the table's prices (Price.Saved); the models it has no price for
// count as nothing.
func (t *Prices) Saved(usage ...ModelUsage) float64 {
	var dollars float64
	for _, mu := range usage {
		if p, ok := t.Lookup(mu.Provider, mu.Model); ok {
			dollars += p.Saved(mu.Usage)
		}
	}
	return dollars
}

// Bounds on a price file, which comes from outside the program.
const (
	// DefaultMaxPriceBytes bounds the file ReadPrices reads; the widely
	// used table of every model is about a hundredth of it.
	DefaultMaxPriceBytes = 32 << 20
	// MaxPriceEntries bounds the models of one file.
	MaxPriceEntries = 100_000
)

// ErrBadPrices: a price file could not be read as a table.
var ErrBadPrices = errors.New("provider: bad price table")

// liteLLMEntry is one model of a price file in LiteLLM's format
// (model_prices_and_context_window.json).
type liteLLMEntry struct {
	Provider       string   `json:"litellm_provider"`
	Input          *float64 `json:"input_cost_per_token"`
	Output         *float64 `json:"output_cost_per_token"`
	CacheRead      *float64 `json:"cache_read_input_token_cost"`
	CacheWrite     *float64 `json:"cache_creation_input_token_cost"`
	MaxInputTokens *float64 `json:"max_input_tokens"`
}

// ReadPrices reads a price table in the format of LiteLLM's
// model_prices_and_context_window.json — an object of models, each with
// input_cost_per_token, output_cost_per_token,
// cache_read_input_token_cost, cache_creation_input_token_cost,
// max_input_tokens and litellm_provider — reading at most maxBytes
// (DefaultMaxPriceBytes when 0). A model is found under its name and
// under "provider/name". Entries without a price (its "sample_spec",
// image or audio models priced otherwise) are left out; one with a price
// that is not a number of zero or more is an error naming it.
func ReadPrices(r io.Reader, maxBytes int64) (*Prices, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxPriceBytes
	}
	data, err := io.ReadAll(io.LimitReader(r, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading it: %w", ErrBadPrices, err)
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("%w: more than %d bytes: pass a larger limit to ReadPrices, or a smaller table", ErrBadPrices, maxBytes)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: %v: give a JSON object of models, as LiteLLM's model_prices_and_context_window.json", ErrBadPrices, err)
	}
	if len(raw) > MaxPriceEntries {
		return nil, fmt.Errorf("%w: %d models, more than %d", ErrBadPrices, len(raw), MaxPriceEntries)
	}
	prices := make(map[string]Price, len(raw))
	for name, v := range raw {
		if name == "sample_spec" {
			continue // the file's description of an entry
		}
		var e liteLLMEntry
		if err := json.Unmarshal(v, &e); err != nil {
			return nil, fmt.Errorf("%w: model %q: %v", ErrBadPrices, name, err)
		}
		if e.Input == nil && e.Output == nil {
			continue // not priced per token
		}
		p := Price{Input: deref(e.Input), Output: deref(e.Output), CacheRead: deref(e.CacheRead), CacheWrite: deref(e.CacheWrite)}
		if w := e.MaxInputTokens; w != nil {
			if *w < 0 || *w > 1e12 || math.IsNaN(*w) {
				return nil, fmt.Errorf("%w: model %q: max_input_tokens %v is no context window", ErrBadPrices, name, *w)
			}
			p.Window = int64(*w)
		}
		if err := p.check(); err != nil {
			return nil, fmt.Errorf("%w: model %q: %w", ErrBadPrices, name, err)
		}
		prices[name] = p
		if e.Provider != "" && !strings.HasPrefix(name, e.Provider+"/") {
			prices[e.Provider+"/"+name] = p
		}
	}
	t, err := NewPrices(prices)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPrices, err)
	}
	return t, nil
}

func deref(f *float64) float64 {
	if f == nil {
		return 0
	}
	return *f
}
