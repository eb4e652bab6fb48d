package usage_test

import (
	"testing"

	"github.com/deputy-go/deputy/internal/usage"
	"github.com/deputy-go/deputy/provider"
)

func TestLessAndMostGoCountByCount(t *testing.T) {
	a := provider.Usage{InputTokens: 10, OutputTokens: 1, CacheReadTokens: 5, CacheWriteTokens: 0, Requests: 2}
	b := provider.Usage{InputTokens: 4, OutputTokens: 3, CacheReadTokens: 5, CacheWriteTokens: 7, Requests: 1}
	if got, want := usage.Less(a, b), (provider.Usage{InputTokens: 6, Requests: 1}); got != want {
		t.Errorf("Less = %+v, want %+v: each count a has beyond b, none below zero", got, want)
	}
	if got, want := usage.Most(a, b), (provider.Usage{InputTokens: 10, OutputTokens: 3, CacheReadTokens: 5, CacheWriteTokens: 7, Requests: 2}); got != want {
		t.Errorf("Most = %+v, want %+v", got, want)
	}
}
