package providertest_test

import (
	"context"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/providertest"
)

// memory is the in-memory provider the package documentation describes.
type memory struct{ s *providertest.Script }

func (m memory) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	return providertest.Complete(ctx, m.s.Next(req))
}

func (m memory) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	return providertest.Stream(ctx, m.s.Next(req), onDelta)
}

// TestRunReference checks that the suite passes a provider that does
// exactly what the scripts say.
func TestRunReference(t *testing.T) {
	providertest.Run(t, func(t *testing.T, s *providertest.Script) provider.Provider {
		return memory{s}
	})
}

// TestRunFunc checks that a provider without streaming passes too.
func TestRunFunc(t *testing.T) {
	providertest.Run(t, func(t *testing.T, s *providertest.Script) provider.Provider {
		return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			return providertest.Complete(ctx, s.Next(req))
		})
	})
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"a", []string{"a"}},
		{"abcd", []string{"ab", "cd"}},
		{"é", []string{"é"}},
		{"aé", []string{"a", "é"}},
	} {
		got := providertest.Split(tc.in)
		if len(got) != len(tc.want) {
			t.Errorf("Split(%q) = %q; want %q", tc.in, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("Split(%q) = %q; want %q", tc.in, got, tc.want)
			}
		}
	}
}
