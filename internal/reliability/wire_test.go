package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/openai"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// vendor is a model server that answers every request with text, in one
// vendor's wire format, and records the request bodies.
type vendor struct {
	name   string
	answer func(text string) string // the reply body
	build  func(url string) (provider.Provider, error)

	mu     sync.Mutex
	bodies []map[string]any
	text   string
}

func (v *vendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	v.mu.Lock()
	v.bodies = append(v.bodies, body)
	text := v.text
	v.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, v.answer(text))
}

func (v *vendor) requests() []map[string]any {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.bodies
}

func vendors() []*vendor {
	quote := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return []*vendor{
		{
			name: "openai",
			answer: func(text string) string {
				return `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-5.4-mini","choices":[{"index":0,"message":{"role":"assistant","content":` +
					quote(text) + `},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`
			},
			build: func(url string) (provider.Provider, error) {
				return openai.New(openai.WithBaseURL(url+"/v1"), openai.WithAPIKey("k"), openai.WithModel("gpt-5.4-mini"), openai.WithMaxRetries(0))
			},
		},
		{
			name: "anthropic",
			answer: func(text string) string {
				return `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-5-5","content":[{"type":"text","text":` +
					quote(text) + `}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}}`
			},
			build: func(url string) (provider.Provider, error) {
				return anthropic.New(anthropic.WithBaseURL(url), anthropic.WithAPIKey("k"), anthropic.WithModel("claude-sonnet-5-5"), anthropic.WithMaxRetries(0))
			},
		},
	}
}

type fileCount struct {
	N    int    `json:"n"`
	Unit string `json:"unit"`
}

// A validated one-shot child, on each real provider, gets the answer's
// schema as the provider's native structured output in its first request,
// and, answering in that shape, is asked once.
func TestShapeOnTheWire(t *testing.T) {
	for _, v := range vendors() {
		t.Run(v.name, func(t *testing.T) {
			v.text = `{"n":3,"unit":"files"}`
			srv := httptest.NewServer(v)
			defer srv.Close()
			p, err := v.build(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			sub, err := subagent.FromFactory("counter", "Counts files.", func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(p, agent.WithName("counter"), agent.WithSystemPrompt("You count files."))
			}, subagent.OutputOf[fileCount]())
			if err != nil {
				t.Fatal(err)
			}
			res, err := sub.Call(t.Context(), tool.Call{ID: "c1", Name: "counter", Arguments: json.RawMessage(`{"task":"count"}`)})
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := res.Value.(fileCount); !ok || got != (fileCount{3, "files"}) {
				t.Errorf("value %#v, want the count", res.Value)
			}
			reqs := v.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			var schema any
			switch v.name {
			case "openai":
				f, _ := reqs[0]["response_format"].(map[string]any)
				js, _ := f["json_schema"].(map[string]any)
				if js["strict"] != true {
					t.Errorf("response_format %v is not strict; the schema is closed and fully required", f)
				}
				schema = js["schema"]
			case "anthropic":
				oc, _ := reqs[0]["output_config"].(map[string]any)
				f, _ := oc["format"].(map[string]any)
				schema = f["schema"]
			}
			props, _ := schema.(map[string]any)["properties"].(map[string]any)
			if _, ok := props["unit"]; !ok {
				t.Errorf("the first request has no schema of the answer: %v", reqs[0])
			}
		})
	}
}

// A resident expert's consultations, on each real provider, send requests
// that each repeat the one before (cache breakpoints aside) and add to its
// end, so that the provider's prompt cache can serve the repeated prefix.
func TestResidentPrefixOnTheWire(t *testing.T) {
	for _, v := range vendors() {
		t.Run(v.name, func(t *testing.T) {
			v.text = "Noted."
			srv := httptest.NewServer(v)
			defer srv.Close()
			p, err := v.build(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			expert, err := agent.NewReact(p, agent.WithName("expert"), agent.WithSystemPrompt("You keep the records."))
			if err != nil {
				t.Fatal(err)
			}
			sub, err := subagent.FromAgent("expert", "Keeps records.", expert)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if _, err := sub.Call(t.Context(), tool.Call{ID: fmt.Sprint("c", i), Name: "expert", Arguments: json.RawMessage(fmt.Sprintf(`{"task":"question %d"}`, i))}); err != nil {
					t.Fatal(err)
				}
			}
			reqs := v.requests()
			if len(reqs) != 3 {
				t.Fatalf("%d requests, want 3", len(reqs))
			}
			var prev []any
			for i, body := range reqs {
				if v.name == "anthropic" {
					sys, _ := body["system"].([]any)
					if len(sys) == 0 || sys[len(sys)-1].(map[string]any)["cache_control"] == nil {
						t.Errorf("request %d: no breakpoint after the system prompt", i+1)
					}
				} else if body["prompt_cache_key"] != "expert" {
					t.Errorf("request %d: prompt_cache_key %v, want the resident's name", i+1, body["prompt_cache_key"])
				}
				strip(body)
				msgs, _ := body["messages"].([]any)
				if prev != nil && (len(msgs) < len(prev) || !reflect.DeepEqual(prev, msgs[:len(prev)])) {
					t.Errorf("request %d does not repeat the request before:\n%v\nwas\n%v", i+1, msgs, prev)
				}
				prev = msgs
			}
		})
	}
}

func strip(v any) {
	switch v := v.(type) {
	case map[string]any:
		delete(v, "cache_control")
		for _, e := range v {
			strip(e)
		}
	case []any:
		for _, e := range v {
			strip(e)
		}
	}
}
