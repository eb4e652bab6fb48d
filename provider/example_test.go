package provider_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deputy-go/deputy/provider"
)

// A Provider can be a plain function: here, a "model" that shouts back.
func ExampleFunc() {
	shout := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		last := req.Messages[len(req.Messages)-1].Content
		return provider.Response{
			Message:    provider.AssistantMessage(strings.ToUpper(last)),
			Usage:      provider.Usage{InputTokens: 3, OutputTokens: 3, Requests: 1},
			StopReason: provider.StopEndTurn,
		}, nil
	})
	resp, err := shout.Complete(context.Background(), provider.Request{
		Messages: []provider.Message{provider.UserMessage("hello")},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Message.Content, "|", resp.Usage)
	// Output: HELLO | 1 req, 3 in, 3 out
}

func ExampleUsage_Add() {
	parent := provider.Usage{InputTokens: 1200, OutputTokens: 300, Requests: 3}
	child := provider.Usage{InputTokens: 800, OutputTokens: 150, Requests: 2}
	total := parent.Add(child)
	fmt.Println(total)
	fmt.Println(total.Tokens(), "tokens")
	// Output:
	// 5 req, 2000 in, 450 out
	// 2450 tokens
}

// Callers branch on a provider failure's kind, through any wrapping.
func ExampleError() {
	err := fmt.Errorf("agent %q: %w", "researcher", &provider.Error{
		Provider:   "openai",
		StatusCode: 429,
		Kind:       provider.KindForStatus(429),
		Message:    "Rate limit reached",
	})
	var pe *provider.Error
	if errors.As(err, &pe) {
		fmt.Println(pe.Kind, "retryable:", pe.Retryable())
	}
	fmt.Println(err)
	// Output:
	// rate limit retryable: true
	// agent "researcher": openai: rate limit (HTTP 429): Rate limit reached (slow down or raise the provider's max retries)
}

func ExampleKindForStatus() {
	for _, status := range []int{400, 401, 413, 429, 503} {
		fmt.Println(status, provider.KindForStatus(status))
	}
	// Output:
	// 400 bad request
	// 401 auth
	// 413 context window exceeded
	// 429 rate limit
	// 503 transient
}

// Admission control keeps the calls of every agent sharing a provider
// within the model's limits: here, two calls at once, whoever makes them.
// The real providers take one with their WithAdmission option; Admit puts
// one around any provider.
func ExampleAdmit() {
	adm, err := provider.NewAdmission(provider.WithLimits("", provider.Limits{InFlight: 2}))
	if err != nil {
		log.Fatal(err)
	}
	var now, most atomic.Int32
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		n := now.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(10 * time.Millisecond)
		now.Add(-1)
		return provider.Response{Message: provider.AssistantMessage("ok")}, nil
	})
	p := provider.Admit(model, adm)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			if _, err := p.Complete(context.Background(), provider.Request{Model: "small"}); err != nil {
				log.Print(err)
			}
		})
	}
	wg.Wait()
	fmt.Println("calls at once, at most:", most.Load())
	// Output: calls at once, at most: 2
}
