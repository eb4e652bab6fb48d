package tool

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func askOnce(t *testing.T, ctx context.Context, c Call, q Question) *Interrupted {
	t.Helper()
	_, err := Ask(ctx, c, q)
	var in *Interrupted
	if !errors.As(err, &in) {
		t.Fatalf("Ask without an answer: want *Interrupted, got %v", err)
	}
	return in
}

func TestResumeRefusesBadAnswers(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	pending := &Interrupted{Interrupts: []Interrupt{
		{ID: "int_a", Reason: "tool_approval", ResponseSchema: ApprovalSchema},
		{ID: "int_b", Reason: "input", ExpiresAt: now.Add(-time.Second)},
		{ID: "int_c", Reason: "input"},
	}}
	before, _ := json.Marshal(pending)
	yes := json.RawMessage(`{"approved":true}`)
	for _, tc := range []struct {
		name    string
		pending *Interrupted
		answers []Answer
		want    error
		say     string
	}{
		{"nothing suspended", nil, []Answer{{InterruptID: "int_a", Status: Resolved}}, ErrNothingSuspended, "without answers"},
		{"unknown id", pending, []Answer{{InterruptID: "int_zz", Status: Resolved}}, ErrUnknownInterrupt, `"int_a", "int_b", "int_c"`},
		{"answered twice", pending, []Answer{{InterruptID: "int_a", Status: Resolved, Payload: yes}, {InterruptID: "int_a", Status: Cancelled}}, ErrAnsweredTwice, "one answer per interrupt"},
		{"expired", pending, []Answer{{InterruptID: "int_b", Status: Resolved}}, ErrExpired, "expired at"},
		{"payload fails the schema", pending, []Answer{{InterruptID: "int_a", Status: Resolved, Payload: json.RawMessage(`{"approved":"yes"}`)}}, ErrBadAnswer, "response schema"},
		{"no payload where the schema wants one", pending, []Answer{{InterruptID: "int_a", Status: Resolved}}, ErrBadAnswer, "response schema"},
		{"bad status", pending, []Answer{{InterruptID: "int_c", Status: "maybe"}}, ErrBadAnswer, `"resolved" or "cancelled"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := resume(ctx, tc.pending, clock, tc.answers)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("err = %v, want %v saying %q", err, tc.want, tc.say)
			}
		})
	}
	if after, _ := json.Marshal(pending); string(after) != string(before) {
		t.Errorf("a refused resume changed the pending interrupts:\n%s\n%s", before, after)
	}
}

func TestAskAnswersAndExpiry(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	call := Call{ID: "c1", Name: "rm", Arguments: json.RawMessage(`{"p":1}`)}
	other := Call{ID: "c2", Name: "rm", Arguments: json.RawMessage(`{"p":2}`)}
	q := Question{Message: "ok?", TTL: time.Minute}
	ctx := context.Background()
	in := askOnce(t, ctx, call, q)
	in2 := askOnce(t, ctx, other, q)
	if in.Interrupts[0].ID == in2.Interrupts[0].ID {
		t.Fatal("two calls got one interrupt id")
	}
	if in.Interrupts[0].ID != askOnce(t, ctx, call, q).Interrupts[0].ID {
		t.Fatal("the same call asked again got another interrupt id")
	}
	pending := &Interrupted{Interrupts: []Interrupt{in.Interrupts[0], in2.Interrupts[0]}}
	pending.Interrupts[0].ExpiresAt = now.Add(time.Minute)
	pending.Interrupts[1].ExpiresAt = now.Add(time.Minute)

	// Answered in any order; an unanswered one is asked again with its
	// first expiry, and fails once that has passed.
	rctx, err := resume(ctx, pending, clock, []Answer{{InterruptID: in.Interrupts[0].ID, Status: Resolved, Payload: json.RawMessage(`"go"`)}})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := Ask(rctx, call, q); err != nil || string(p) != `"go"` {
		t.Fatalf("answered: %s, %v", p, err)
	}
	again := askOnce(t, rctx, other, q)
	if !again.Interrupts[0].ExpiresAt.Equal(now.Add(time.Minute)) {
		t.Errorf("asked again with expiry %v, want the first one", again.Interrupts[0].ExpiresAt)
	}
	now = now.Add(2 * time.Minute)
	_, err = Ask(rctx, other, q)
	if !errors.Is(err, ErrExpired) || !IsCorrectable(err) {
		t.Fatalf("after expiry: %v, want a correctable ErrExpired", err)
	}
	cctx, err := resume(ctx, &Interrupted{Interrupts: []Interrupt{in.Interrupts[0]}}, clock, []Answer{{InterruptID: in.Interrupts[0].ID, Status: Cancelled}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Ask(cctx, call, q); !errors.Is(err, ErrCancelled) || !IsCorrectable(err) {
		t.Fatalf("cancelled: %v, want a correctable ErrCancelled", err)
	}
}

func TestExecuteGathersInterruptsAndFinishesSiblings(t *testing.T) {
	ran := make(chan string, 4)
	plain := func(name string) Tool {
		tl, err := New(name, "x", func(ctx context.Context, in struct{}) (string, error) {
			time.Sleep(20 * time.Millisecond) // still running when the others ask
			ran <- name
			return name + " ok", nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return tl
	}
	r, err := NewRegistry(RequireApproval(plain("a"), "", 0), plain("b"), RequireApproval(plain("c"), "", 0))
	if err != nil {
		t.Fatal(err)
	}
	calls := []Call{{ID: "1", Name: "a", Arguments: json.RawMessage(`{}`)}, {ID: "2", Name: "b", Arguments: json.RawMessage(`{}`)}, {ID: "3", Name: "c", Arguments: json.RawMessage(`{}`)}}
	res, err := r.Execute(context.Background(), calls)
	var in *Interrupted
	if !errors.As(err, &in) {
		t.Fatalf("err = %v, want *Interrupted", err)
	}
	if len(in.Interrupts) != 2 || in.Interrupts[0].ToolCallID != "1" || in.Interrupts[1].ToolCallID != "3" {
		t.Fatalf("interrupts = %+v, want calls 1 and 3 in order", in.Interrupts)
	}
	if res[1].Content != "b ok" || len(ran) != 1 {
		t.Errorf("the sibling that did not ask: %+v (ran %d), want it finished", res[1], len(ran))
	}
}

func TestAskRefusesABadResponseSchema(t *testing.T) {
	call := Call{ID: "c", Name: "rm", Arguments: json.RawMessage(`{}`)}
	for _, schema := range []string{`{"type":"nonsense"}`, `true`, `[1]`} {
		_, err := Ask(context.Background(), call, Question{ResponseSchema: json.RawMessage(schema)})
		var in *Interrupted
		if err == nil || errors.As(err, &in) || !strings.Contains(err.Error(), "response schema") {
			t.Errorf("schema %s: err = %v, want a clear error and no interrupt", schema, err)
		}
	}
}

// A question whose response schema Resume would refuse (here, nested past
// the untrusted-schema depth) is refused when it is asked, rather than
// leaving the run waiting for an answer that can never be accepted.
func TestAskRefusesAResponseSchemaResumeWouldRefuse(t *testing.T) {
	deep := `{"type":"object"}`
	for range 40 {
		deep = `{"type":"object","properties":{"x":` + deep + `}}`
	}
	_, err := Ask(context.Background(), Call{ID: "c1", Name: "ask"}, Question{Message: "?", ResponseSchema: json.RawMessage(deep)})
	var in *Interrupted
	if err == nil || errors.As(err, &in) || !strings.Contains(err.Error(), "response schema") {
		t.Fatalf("%v, want an error about the response schema and no interrupt", err)
	}
}
