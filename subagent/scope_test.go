package subagent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
)

type userKey struct{}

func byUser(ctx context.Context) (string, error) {
	u, _ := ctx.Value(userKey{}).(string)
	if u == "" {
		return "", errors.New("no user")
	}
	return "user/" + u, nil
}

// secrets is a model that answers "noted" and keeps every request, so
// that a test can see which users' secrets a conversation held.
type secrets struct {
	mu   sync.Mutex
	reqs [][]provider.Message
}

func (s *secrets) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, req.Messages)
	s.mu.Unlock()
	return provider.Response{Message: provider.AssistantMessage("noted"), StopReason: provider.StopEndTurn}, nil
}

var secretRE = regexp.MustCompile(`secret-(u\d+)-(\d+)`)

// checkScopes fails when a request held secrets of two users, or missed an
// earlier secret of its own user.
func (s *secrets) checkScopes(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, msgs := range s.reqs {
		var text strings.Builder
		for _, m := range msgs {
			text.WriteString(m.Content + "\n")
		}
		found := secretRE.FindAllStringSubmatch(text.String(), -1)
		for i, f := range found {
			if f[1] != found[0][1] {
				t.Fatalf("one conversation holds secrets of %s and %s: %s", found[0][1], f[1], text.String())
			}
			if f[2] != fmt.Sprint(i) {
				t.Fatalf("a conversation of %s holds its secrets as %v: it forgot one", f[1], found)
			}
		}
	}
}

func scopedExpert(t *testing.T, m *secrets, opts ...Option) *SubAgentTool {
	t.Helper()
	return must(FromScoped("expert", "Remembers what each user told it.", byUser, func(scope string) (agent.Agent, error) {
		return agent.NewReact(m, agent.WithName("expert"))
	}, opts...))(t)
}

// hammer has users callers call sub rounds times each, all at once.
func hammer(t *testing.T, sub *SubAgentTool, users, rounds int) {
	t.Helper()
	var wg sync.WaitGroup
	for u := range users {
		wg.Go(func() {
			ctx := context.WithValue(context.Background(), userKey{}, fmt.Sprint("u", u))
			for i := range rounds {
				if _, err := callTool(ctx, sub, fmt.Sprint("call_", i), fmt.Sprintf(`{"task":"remember secret-u%d-%d"}`, u, i)); err != nil {
					t.Errorf("user %d call %d: %v", u, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Fifty users hammer one scoped expert at once: each user's conversation
// holds all of that user's secrets and none of another's.
func TestScopesNeverSeeEachOther(t *testing.T) {
	m := &secrets{}
	sub := scopedExpert(t, m)
	hammer(t, sub, 50, 4)
	m.checkScopes(t)
	if len(m.reqs) != 200 {
		t.Fatalf("%d model calls, want 200", len(m.reqs))
	}
	// The last request of each user holds its 4 secrets.
	last := map[string]int{}
	for _, msgs := range m.reqs {
		if f := secretRE.FindAllStringSubmatch(msgs[len(msgs)-1].Content, -1); len(f) == 1 {
			last[f[0][1]] = max(last[f[0][1]], len(msgs))
		}
	}
	for u, n := range last {
		if n != 7 { // 3 earlier turns of two messages, and the question
			t.Fatalf("user %s's last request had %d messages, want 7", u, n)
		}
	}
}

// Stored scopes: two replicas of one expert over one store keep each
// user's conversation, and DeleteScope forgets one user's.
func TestStoredScopesAcrossReplicas(t *testing.T) {
	// Nothing here waits for a lease to lapse, so the lease is long enough
	// that a renewal delayed by a loaded machine under -race is not lost.
	st := openStore(t, filepath.Join(t.TempDir(), "s.db"), store.WithLeaseTTL(10*time.Second))
	m := &secrets{}
	a := scopedExpert(t, m, WithStore(st, "experts/e"))
	b := scopedExpert(t, m, WithStore(st, "experts/e"))
	hammer(t, a, 10, 2)
	m.reqs = nil
	// The other replica continues each user's conversation from the store.
	for u := range 10 {
		ctx := context.WithValue(context.Background(), userKey{}, fmt.Sprint("u", u))
		if _, err := callTool(ctx, b, "call_9", fmt.Sprintf(`{"task":"remember secret-u%d-2"}`, u)); err != nil {
			t.Fatal(err)
		}
	}
	m.checkScopes(t)
	for _, msgs := range m.reqs {
		if len(msgs) != 5 {
			t.Fatalf("the second replica's call saw %d messages, want the scope's 4 and its question", len(msgs))
		}
	}
	if err := st.DeleteScope(context.Background(), "user/u3"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := st.ReadParts(context.Background(), store.ScopeKey("user/u3", "experts/e"), store.Parts{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("u3's conversation after DeleteScope: %v", err)
	}
	if _, _, _, err := st.ReadParts(context.Background(), store.ScopeKey("user/u4", "experts/e"), store.Parts{}); err != nil {
		t.Fatalf("u4's conversation after deleting u3's: %v", err)
	}
	m.reqs = nil
	ctx := context.WithValue(context.Background(), userKey{}, "u3")
	if _, err := callTool(ctx, a, "call_0", `{"task":"remember secret-u3-0"}`); err != nil {
		t.Fatal(err)
	}
	if got := len(m.reqs[0]); got != 1 {
		t.Fatalf("u3's first call after DeleteScope saw %d messages, want a fresh conversation", got)
	}
}

// Past WithMaxScopes the least recently used idle scope is forgotten in
// memory, and read back from the store when there is one.
func TestMaxScopesEvictsTheOldest(t *testing.T) {
	for _, stored := range []bool{false, true} {
		t.Run(fmt.Sprint("stored=", stored), func(t *testing.T) {
			m := &secrets{}
			opts := []Option{WithMaxScopes(2)}
			if stored {
				opts = append(opts, WithStore(openStore(t, filepath.Join(t.TempDir(), "s.db")), "e"))
			}
			sub := scopedExpert(t, m, opts...)
			for _, u := range []string{"u0", "u1", "u2", "u0"} {
				ctx := context.WithValue(context.Background(), userKey{}, u)
				if _, err := callTool(ctx, sub, "c", fmt.Sprintf(`{"task":"secret-%s-0"}`, u)); err != nil {
					t.Fatal(err)
				}
			}
			want := 1 // u0 was forgotten when u2 came
			if stored {
				want = 3
			}
			if got := len(m.reqs[3]); got != want {
				t.Fatalf("u0's second call saw %d messages, want %d", got, want)
			}
			if n := len(sub.scoped.live); n != 2 {
				t.Fatalf("%d scopes in memory, want 2", n)
			}
		})
	}
}

func TestScopeMisuse(t *testing.T) {
	m := &secrets{}
	sub := must(FromScoped("expert", "Remembers.", PerThread, func(string) (agent.Agent, error) { return agent.NewReact(m) }))(t)
	_, err := callTool(context.Background(), sub, "c", `{"task":"hi"}`)
	if !errors.Is(err, ErrNoScope) || !strings.Contains(err.Error(), "agent.WithThread") {
		t.Fatalf("a PerThread call outside any thread: %v, want ErrNoScope saying what to do", err)
	}
	if _, err := callTool(agent.WithThread(context.Background(), "t1"), sub, "c", `{"task":"hi"}`); err != nil {
		t.Fatalf("a call in a thread: %v", err)
	}
	if _, err := FromAgent("e", "d", agent.Agent(nil), WithMaxScopes(3)); err == nil {
		t.Fatal("FromAgent took a nil agent")
	}
	r, _ := agent.NewReact(m)
	if _, err := FromAgent("e", "d", r, WithMaxScopes(3)); err == nil || !strings.Contains(err.Error(), "FromAgent would ignore it") {
		t.Fatalf("FromAgent with WithMaxScopes: %v", err)
	}
	if _, err := FromScoped("e", "d", PerThread, func(string) (agent.Agent, error) { return agent.NewReact(m) }, WithMaxScopes(0)); err == nil {
		t.Fatal("WithMaxScopes(0) was taken")
	}
	notPersistent := must(FromScoped("e", "d", PerThread, func(string) (agent.Agent, error) { return agent.Func(nil), nil },
		WithStore(openStore(t, filepath.Join(t.TempDir(), "s.db")), "k")))(t)
	if _, err := callTool(agent.WithThread(context.Background(), "t1"), notPersistent, "c", `{"task":"hi"}`); err == nil || !strings.Contains(err.Error(), "cannot save its conversation") {
		t.Fatalf("a stored scope of an agent that cannot save: %v", err)
	}
}

// A scoped resident with the default parameters hands its child the
// task's text, as FromAgent does, not the arguments' JSON.
func TestScopedChildGetsTheTaskText(t *testing.T) {
	m := &secrets{}
	sub, err := FromScoped("notes", "Keeps notes.", byUser, func(string) (agent.Agent, error) {
		return agent.NewReact(m, agent.WithName("notes"))
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), userKey{}, "u1")
	if _, err := callTool(ctx, sub, "call_1", `{"task":"Say \"hi\"."}`); err != nil {
		t.Fatal(err)
	}
	if got := m.reqs[0][0].Content; got != `Say "hi".` {
		t.Errorf("the child was handed %q, want the task's text", got)
	}
}
