package agent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// fanOut is a model turn of n calls to the tool "part", then an answer.
func fanOut(n int) *fake.Provider {
	calls := make([]provider.ToolCall, n)
	for i := range calls {
		calls[i] = provider.ToolCall{Name: "part", Arguments: []byte(fmt.Sprintf(`{"i":%d}`, i))}
	}
	return fake.NewProvider(fake.Calls(calls...), fake.Text("done"))
}

// peak is a tool that records how many of its calls run at once; each call
// waits until want calls are in, or until a short wait has passed.
type peak struct {
	mu        sync.Mutex
	now, most int
	want      int
	closed    bool
	all       chan struct{}
}

func (p *peak) tool() tool.Tool {
	p.all = make(chan struct{})
	return toolFunc("part", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		p.mu.Lock()
		p.now++
		p.most = max(p.most, p.now)
		if p.now == p.want && !p.closed {
			p.closed = true
			close(p.all)
		}
		p.mu.Unlock()
		select {
		case <-p.all:
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
		p.mu.Lock()
		p.now--
		p.mu.Unlock()
		return tool.Result{Content: "ok"}, nil
	})
}

// A default agent runs a fan-out of 64 calls in one wave; WithParallelism
// lowers the bound, whatever the order of the options.
func TestReactParallelism(t *testing.T) {
	tests := []struct {
		name string
		opts func(tl tool.Tool) []agent.Option
		want int
	}{
		{"default", func(tl tool.Tool) []agent.Option { return []agent.Option{agent.WithTools(tl)} }, 64},
		{"WithParallelism after the tools", func(tl tool.Tool) []agent.Option {
			return []agent.Option{agent.WithTools(tl), agent.WithParallelism(3)}
		}, 3},
		{"WithParallelism before the tools", func(tl tool.Tool) []agent.Option {
			return []agent.Option{agent.WithParallelism(5), agent.WithTools(tl)}
		}, 5},
		{"WithParallelism on a registry", func(tl tool.Tool) []agent.Option {
			reg, err := tool.NewRegistry(tl)
			if err != nil {
				t.Fatal(err)
			}
			return []agent.Option{agent.WithParallelism(7), agent.WithRegistry(reg)}
		}, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pk := &peak{want: tt.want}
			a := newReact(t, fanOut(64), tt.opts(pk.tool())...)
			if _, err := a.Run(t.Context(), agent.Input{Text: "go"}); err != nil {
				t.Fatal(err)
			}
			if pk.most != tt.want {
				t.Errorf("at most %d calls ran at once, want %d", pk.most, tt.want)
			}
		})
	}
}
