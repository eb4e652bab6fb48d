package a2a_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
)

// What the A2A 1.0 conformance kit (a2aproject/a2a-tck) asks of a server,
// each requirement checked here with the official Go SDK's client.

// counted serves an agent that answers "got: " and the text, counting its
// runs.
func counted(t *testing.T) (*a2a.Server, *atomic.Int64) {
	t.Helper()
	var runs atomic.Int64
	s, err := a2a.NewServer(agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		runs.Add(1)
		return agent.Output{Answer: "got: " + in.Text}, nil
	}), a2a.WithName("counter"), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	return s, &runs
}

// A part the agent cannot read (a file, whole or by URL; text or data of
// another media type) is refused with ContentTypeNotSupportedError, over
// both bindings, and the agent does not run: beside a text part it is
// never dropped as if the text were the whole message.
func TestUnreadablePartIsContentTypeNotSupported(t *testing.T) {
	t.Parallel()
	file := func(mt string) *sdk.Part {
		p := sdk.NewRawPart([]byte{0x89, 'P', 'N', 'G'})
		p.MediaType = mt
		return p
	}
	link := sdk.NewFileURLPart("https://example.com/invoice.pdf", "application/pdf")
	html := sdk.NewTextPart("<b>hi</b>")
	html.MediaType = "image/svg+xml"
	for _, binding := range []sdk.TransportProtocol{sdk.TransportProtocolJSONRPC, sdk.TransportProtocolHTTPJSON} {
		s, runs := counted(t)
		c, _ := serve(t, s, binding)
		for name, parts := range map[string][]*sdk.Part{
			"a file beside text":    {sdk.NewTextPart("what is in this picture?"), file("image/png")},
			"a file alone":          {file("image/png")},
			"a file by URL":         {sdk.NewTextPart("read this"), link},
			"text of an image type": {html},
		} {
			m := sdk.NewMessage(sdk.MessageRoleUser, parts...)
			_, err := c.SendMessage(context.Background(), &sdk.SendMessageRequest{Message: m})
			if !errors.Is(err, sdk.ErrUnsupportedContentType) {
				t.Errorf("%s, %s: %v, want ContentTypeNotSupportedError", binding, name, err)
			}
			_, err = tryStream(c, m)
			if !errors.Is(err, sdk.ErrUnsupportedContentType) {
				t.Errorf("%s, %s, streamed: %v, want ContentTypeNotSupportedError", binding, name, err)
			}
		}
		if runs.Load() != 0 {
			t.Errorf("%s: the agent ran %d times on messages it cannot read", binding, runs.Load())
		}
		ok := sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("hello"), sdk.NewDataPart(map[string]any{"order": "A-1"}))
		if st := lastStatus(t, stream(t, c, ok)); st.Status.State != sdk.TaskStateCompleted {
			t.Errorf("%s: text and data: %s", binding, st.Status.State)
		}
	}
}

// post sends body to the server's path with the headers given, and
// returns the response's status and body.
func post(t *testing.T, url string, body string, header map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// rpcErrorCode reads the code of a JSON-RPC error response, 0 for none.
func rpcErrorCode(t *testing.T, body []byte) int {
	t.Helper()
	var resp struct {
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("not a JSON-RPC response: %v: %s", err, body)
	}
	if resp.Error == nil {
		return 0
	}
	return resp.Error.Code
}

const sendHello = `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m1","parts":[{"text":"hello"}]}}}`
const sendHelloREST = `{"message":{"role":"ROLE_USER","messageId":"m1","parts":[{"text":"hello"}]}}`

// A body declared as something other than JSON is refused with
// ContentTypeNotSupportedError: over JSON-RPC its code, over HTTP+JSON 415.
func TestBodyNotDeclaredJSONIsRefused(t *testing.T) {
	t.Parallel()
	s, runs := counted(t)
	hs := startServer(t, s)
	textPlain := map[string]string{"Content-Type": "text/plain", "A2A-Version": "1.0"}
	if status, body := post(t, hs.URL, sendHello, textPlain); rpcErrorCode(t, body) != -32005 {
		t.Errorf("JSON-RPC, text/plain: %d %s, want error -32005", status, body)
	}
	if status, body := post(t, hs.URL+"/rest/message:send", sendHelloREST, textPlain); status != http.StatusUnsupportedMediaType || !strings.Contains(string(body), "CONTENT_TYPE_NOT_SUPPORTED") {
		t.Errorf("REST, text/plain: %d %s, want 415", status, body)
	}
	if runs.Load() != 0 {
		t.Errorf("the agent ran %d times", runs.Load())
	}
	if status, body := post(t, hs.URL, sendHello, map[string]string{"Content-Type": "application/json; charset=utf-8", "A2A-Version": "1.0"}); rpcErrorCode(t, body) != 0 {
		t.Errorf("JSON-RPC, application/json with a charset: %d %s", status, body)
	}
}

// The A2A-Version header is checked: a version the server does not speak
// is refused with VersionNotSupportedError in the binding's form, and
// nothing runs; 1.0 (any patch) is served.
func TestVersionHeaderIsChecked(t *testing.T) {
	t.Parallel()
	s, runs := counted(t)
	hs := startServer(t, s)
	for _, v := range []string{"99.0", "2", "1.1", "0.2", "x"} {
		if status, body := post(t, hs.URL, sendHello, map[string]string{"A2A-Version": v}); rpcErrorCode(t, body) != -32009 {
			t.Errorf("JSON-RPC, A2A-Version %s: %d %s, want error -32009", v, status, body)
		}
		if status, body := post(t, hs.URL+"/rest/message:send", sendHelloREST, map[string]string{"A2A-Version": v}); status != http.StatusBadRequest || !strings.Contains(string(body), "VERSION_NOT_SUPPORTED") {
			t.Errorf("REST, A2A-Version %s: %d %s, want 400 VERSION_NOT_SUPPORTED", v, status, body)
		}
	}
	if runs.Load() != 0 {
		t.Errorf("the agent ran %d times for versions it does not speak", runs.Load())
	}
	for _, v := range []string{"1.0", "1.0.3"} {
		if status, body := post(t, hs.URL, sendHello, map[string]string{"A2A-Version": v}); rpcErrorCode(t, body) != 0 {
			t.Errorf("A2A-Version %s: %d %s", v, status, body)
		}
	}
}

// A client of A2A 0.3 (the SDK's compatibility transports, which send no
// A2A-Version, and 0.3's methods and paths) is served, over both
// bindings: it reads the card, and its message runs the agent.
func TestProtocol03ClientIsServed(t *testing.T) {
	t.Parallel()
	s, runs := counted(t)
	hs := startServer(t, s)
	ctx := context.Background()
	card, err := (&agentcard.Resolver{CardParser: a2av0.NewAgentCardParser()}).Resolve(ctx, hs.URL)
	if err != nil {
		t.Fatalf("a 0.3 client cannot read the card: %v", err)
	}
	for _, binding := range []sdk.TransportProtocol{sdk.TransportProtocolJSONRPC, sdk.TransportProtocolHTTPJSON} {
		f := a2aclient.NewFactory(a2aclient.WithDefaultsDisabled(),
			a2aclient.WithCompatTransport(a2av0.Version, sdk.TransportProtocolJSONRPC, a2av0.NewJSONRPCTransportFactory(a2av0.JSONRPCTransportConfig{})),
			a2aclient.WithCompatTransport(a2av0.Version, sdk.TransportProtocolHTTPJSON, a2av0.NewRESTTransportFactory(a2av0.RESTTransportConfig{})),
			a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []sdk.TransportProtocol{binding}}))
		c, err := f.CreateFromCard(ctx, card)
		if err != nil {
			t.Fatalf("%s: %v", binding, err)
		}
		defer c.Destroy()
		res, err := c.SendMessage(ctx, &sdk.SendMessageRequest{Message: userText("hello")})
		if err != nil {
			t.Fatalf("%s: a 0.3 client's message: %v", binding, err)
		}
		task, ok := res.(*sdk.Task)
		if !ok || task.Status.State != sdk.TaskStateCompleted || len(task.Artifacts) == 0 || task.Artifacts[0].Parts[0].Text() != "got: hello" {
			t.Errorf("%s: a 0.3 client's message: %#v", binding, res)
		}
		if _, err := c.GetTask(ctx, &sdk.GetTaskRequest{ID: task.ID}); err != nil {
			t.Errorf("%s: a 0.3 client reads its task: %v", binding, err)
		}
	}
	if runs.Load() != 2 {
		t.Errorf("the agent ran %d times for 2 messages", runs.Load())
	}
}

// A task waiting for input can be subscribed to: the stream is the task
// as stored, waiting, and ends there; the answer then completes it, and a
// subscription to the completed task is refused as an unsupported
// operation — over both bindings.
func TestSubscribeToWaitingTask(t *testing.T) {
	t.Parallel()
	for _, binding := range []sdk.TransportProtocol{sdk.TransportProtocolJSONRPC, sdk.TransportProtocolHTTPJSON} {
		p := newPayer(t, idModes[0].id)
		s, err := a2a.NewPerTask(p.build, a2a.WithName("payer"), a2a.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		c, _ := serve(t, s, binding)
		asked := lastStatus(t, stream(t, c, userText("pay")))
		if asked.Status.State != sdk.TaskStateInputRequired {
			t.Fatalf("%s: %s", binding, asked.Status.State)
		}
		var evs []sdk.Event
		for ev, err := range c.SubscribeToTask(context.Background(), &sdk.SubscribeToTaskRequest{ID: asked.TaskID}) {
			if err != nil {
				t.Fatalf("%s: subscribing to the waiting task: %v", binding, err)
			}
			evs = append(evs, ev)
		}
		if len(evs) == 0 {
			t.Fatalf("%s: no event, want the task", binding)
		}
		if task, ok := evs[0].(*sdk.Task); !ok || task.ID != asked.TaskID || task.Status.State != sdk.TaskStateInputRequired {
			t.Fatalf("%s: the first event is %#v, want the waiting task", binding, evs[0])
		}
		// A subscription that catches the run before its task is stored
		// as waiting follows it to its end: the task still waits in each.
		for _, ev := range evs[1:] {
			var state sdk.TaskState
			switch e := ev.(type) {
			case *sdk.Task:
				state = e.Status.State
			case *sdk.TaskStatusUpdateEvent:
				state = e.Status.State
			}
			if state != sdk.TaskStateInputRequired {
				t.Errorf("%s: after the task, %#v", binding, ev)
			}
		}
		// An answer the agent cannot read is refused, and the task waits on.
		picture := sdk.NewRawPart([]byte("GIF89a"))
		picture.MediaType = "image/gif"
		if _, err := tryStream(c, reply(sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("yes"), picture), asked)); !errors.Is(err, sdk.ErrUnsupportedContentType) {
			t.Errorf("%s: an answer holding a picture: %v, want ContentTypeNotSupportedError", binding, err)
		}
		if task, err := c.GetTask(context.Background(), &sdk.GetTaskRequest{ID: asked.TaskID}); err != nil || task.Status.State != sdk.TaskStateInputRequired {
			t.Fatalf("%s: after an answer refused: %v, %v", binding, task, err)
		}
		if st := lastStatus(t, stream(t, c, reply(userText("yes"), asked))); st.Status.State != sdk.TaskStateCompleted {
			t.Fatalf("%s: the answer: %s", binding, st.Status.State)
		}
		for _, err := range c.SubscribeToTask(context.Background(), &sdk.SubscribeToTaskRequest{ID: asked.TaskID}) {
			if !errors.Is(err, sdk.ErrUnsupportedOperation) {
				t.Errorf("%s: subscribing to the completed task: %v, want UnsupportedOperationError", binding, err)
			}
			break
		}
		if p.transfers.Load() != 1 {
			t.Errorf("%s: %d transfers", binding, p.transfers.Load())
		}
	}
}

// The agent card can be cached: Cache-Control with a max-age, an ETag,
// and 304 Not Modified, without the card, to a request naming its ETag.
// Both versions of the protocol read it.
func TestAgentCardCaches(t *testing.T) {
	t.Parallel()
	s, _ := counted(t)
	hs := startServer(t, s)
	url := hs.URL + "/.well-known/agent-card.json"
	get := func(header map[string]string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := get(nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	etag := resp.Header.Get("ETag")
	if resp.StatusCode != http.StatusOK || etag == "" || !strings.Contains(resp.Header.Get("Cache-Control"), "max-age=") {
		t.Fatalf("the card: %d, ETag %q, Cache-Control %q", resp.StatusCode, etag, resp.Header.Get("Cache-Control"))
	}
	for _, match := range []string{etag, `"other", ` + etag, "W/" + etag, "*"} {
		resp := get(map[string]string{"If-None-Match": match})
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified || len(b) != 0 || resp.Header.Get("ETag") != etag {
			t.Errorf("If-None-Match %s: %d, %d bytes, ETag %q, want 304 and no body", match, resp.StatusCode, len(b), resp.Header.Get("ETag"))
		}
	}
	resp = get(map[string]string{"If-None-Match": `"stale"`})
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(b, body) {
		t.Errorf("a stale ETag: %d, want 200 and the card", resp.StatusCode)
	}
	for name, parser := range map[string]agentcard.Parser{"1.0": nil, "0.3": a2av0.NewAgentCardParser()} {
		card, err := (&agentcard.Resolver{CardParser: parser}).Resolve(context.Background(), hs.URL)
		if err != nil || card.Name != "counter" {
			t.Errorf("a %s client reads the card: %v, %v", name, card, err)
		}
	}
}
