package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

func TestRunEndsWithOutcomeWhenPausedOrCancelled(t *testing.T) {
	var cancelRun context.CancelFunc
	asker, err := tool.New("ask", "Asks.", func(ctx context.Context, in struct{}) (string, error) { return "", nil })
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    provider.Provider
		want string
	}{
		{"paused by an interrupt", provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			m := provider.AssistantMessage("")
			m.ToolCalls = []provider.ToolCall{{ID: "c1", Name: "ask", Arguments: json.RawMessage(`{}`)}}
			return provider.Response{Message: m, StopReason: provider.StopToolUse}, nil
		}), "interrupt"},
		{"cancelled by the caller", provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			cancelRun() // the caller stops the run while the model works
			<-ctx.Done()
			return provider.Response{}, ctx.Err()
		}), "cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := agent.NewReact(tc.p, agent.WithTools(tool.RequireApproval(asker, "", 0)))
			if err != nil {
				t.Fatal(err)
			}
			var rec eventcheck.Recorder
			ctx, cancel := context.WithCancel(event.WithSink(context.Background(), &rec))
			cancelRun = cancel
			defer cancel()
			_, err = r.Run(ctx, agent.Input{Text: "go"})
			var in *tool.Interrupted
			if tc.want == "interrupt" && !errors.As(err, &in) {
				t.Fatalf("err = %v, want an interrupt", err)
			}
			evs := rec.Events()
			last := evs[len(evs)-1]
			var o struct{ Type string }
			_ = json.Unmarshal(last.Outcome, &o)
			if last.Type != event.RunFinished || o.Type != tc.want {
				t.Fatalf("the run ended with %s %s, want RUN_FINISHED outcome %s", last.Type, last.Outcome, tc.want)
			}
		})
	}
}
