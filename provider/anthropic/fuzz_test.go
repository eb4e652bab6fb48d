package anthropic_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
)

// FuzzStreamAssembly streams any body as a reply. Stream must not panic,
// must fail only with a *provider.Error, must deliver no text or arguments
// past the limits, and must return what it delivered.
func FuzzStreamAssembly(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "responses", "*.sse"))
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(messageStart + textStart(0) + textDelta(0, "a") + toolStart(1, "t", "f") + argsDelta(1, `{"x":`) + argsDelta(1, "1}") + messageEnd))
	const limit = 256
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := anthropic.New(
			anthropic.WithBaseURL("http://model.test/"),
			anthropic.WithAPIKey("sk-test"),
			anthropic.WithMaxRetries(0),
			anthropic.WithMaxResponseBytes(1<<16),
			anthropic.WithMaxTextBytes(limit),
			anthropic.WithMaxArgumentBytes(limit),
			anthropic.WithHTTPClient(&http.Client{Transport: wiretest.Generated{Head: string(body)}}),
		)
		if err != nil {
			t.Fatal(err)
		}
		var text int
		args := map[int]*bytes.Buffer{}
		resp, err := p.Stream(t.Context(), provider.Request{Messages: []provider.Message{provider.UserMessage("Hi.")}}, func(d provider.Delta) error {
			text += len(d.Text)
			if d.HasToolCall() {
				if args[d.ToolCall.Index] == nil {
					args[d.ToolCall.Index] = new(bytes.Buffer)
				}
				args[d.ToolCall.Index].WriteString(d.ToolCall.Arguments)
			}
			return nil
		})
		if text > limit {
			t.Fatalf("%d bytes of text delivered; the limit is %d", text, limit)
		}
		for i, a := range args {
			if a.Len() > limit {
				t.Fatalf("%d bytes of arguments delivered for call %d; the limit is %d", a.Len(), i, limit)
			}
		}
		if err != nil {
			var perr *provider.Error
			if !errors.As(err, &perr) {
				t.Fatalf("error %v (%T) is not a *provider.Error", err, err)
			}
			return
		}
		if len(resp.Message.Content) != text {
			t.Errorf("the reply has %d bytes of text; %d were delivered", len(resp.Message.Content), text)
		}
		for i, c := range resp.Message.ToolCalls {
			if args[i] == nil || args[i].Len() == 0 {
				continue // the arguments, if any, came whole with the call's start
			}
			want := []byte("{}")
			if a := args[i]; len(bytes.TrimSpace(a.Bytes())) > 0 {
				want = a.Bytes()
				var buf bytes.Buffer
				if json.Compact(&buf, want) == nil {
					want = buf.Bytes()
				}
			}
			if !bytes.Equal(c.Arguments, want) {
				t.Errorf("call %d: arguments %q; delivered %q", i, c.Arguments, want)
			}
		}
	})
}
