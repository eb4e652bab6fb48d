package a2a

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"iter"
	"mime"
	"net/http"
	"strings"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/a2aproject/a2a-go/v2/errordetails"
)

// bindings are the handlers of the protocol a Server speaks: A2A 1.0 over
// JSON-RPC at the root and HTTP+JSON under /rest, and A2A 0.3 over the
// same two, through the SDK's compatibility handlers (0.3's JSON-RPC
// methods at the root, its REST paths under /rest/v1).
type bindings struct {
	jsonrpc, rest, jsonrpc03, rest03 http.Handler
}

func newBindings(h a2asrv.RequestHandler) bindings {
	return bindings{
		jsonrpc:   a2asrv.NewJSONRPCHandler(h),
		rest:      http.StripPrefix("/rest", a2asrv.NewRESTHandler(h)),
		jsonrpc03: a2av0.NewJSONRPCHandler(h),
		rest03:    http.StripPrefix("/rest", a2av0.NewRESTHandler(h)),
	}
}

// serve hands r, whose body is body, to the binding and version it is
// for: the version its A2A-Version header names (1.0 or 0.3, any patch);
// without one, 0.3 for a request of 0.3's own form (a JSON-RPC method of
// 0.3's names, a REST path under /rest/v1), as the protocol has it, and 1.0
// for any other. A version not served, or a body declared as something
// other than JSON, is refused with the protocol's error, in the binding's
// form.
func (b bindings) serve(w http.ResponseWriter, r *http.Request, body []byte) {
	isREST := r.URL.Path == "/rest" || strings.HasPrefix(r.URL.Path, "/rest/")
	v1, v03 := b.jsonrpc, b.jsonrpc03
	if isREST {
		v1, v03 = b.rest, b.rest03
	}
	if err := jsonBody(r); err != nil {
		if isREST {
			unsupportedMediaType(w, err)
		} else {
			refuse(false, err).ServeHTTP(w, r)
		}
		return
	}
	legacy, err := wantsLegacy(r, isREST, body)
	switch {
	case err != nil:
		refuse(isREST, err).ServeHTTP(w, r)
	case legacy:
		v03.ServeHTTP(w, r)
	default:
		v1.ServeHTTP(w, r)
	}
}

// jsonBody checks the media type a request declares for its body: JSON,
// or none said.
func jsonBody(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" || r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodDelete {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return fmt.Errorf("%w: a body of Content-Type %q: send it as application/json", sdk.ErrUnsupportedContentType, clip(ct, 64))
}

// unsupportedMediaType answers a REST request whose body is not JSON:
// 415, as the protocol maps ContentTypeNotSupportedError over HTTP, in
// the binding's form of an error (AIP-193).
func unsupportedMediaType(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnsupportedMediaType)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code":    http.StatusUnsupportedMediaType,
		"status":  "INVALID_ARGUMENT",
		"message": err.Error(),
		"details": []*errordetails.Typed{errordetails.NewErrorInfo(sdk.ErrorReason(sdk.ErrUnsupportedContentType), sdk.ProtocolDomain, nil)},
	}})
}

// wantsLegacy reports whether r is served as A2A 0.3, or why it cannot be
// served.
func wantsLegacy(r *http.Request, isREST bool, body []byte) (bool, error) {
	v := strings.TrimSpace(r.Header.Get(sdk.SvcParamVersion))
	if v == "" {
		if isREST {
			return strings.HasPrefix(r.URL.Path, "/rest"+a2av0.RESTPathPrefix+"/"), nil
		}
		var call struct {
			Method string `json:"method"`
		}
		_ = json.Unmarshal(body, &call)
		return strings.Contains(call.Method, "/"), nil
	}
	parts := strings.Split(v, ".")
	if len(parts) >= 2 && len(parts) <= 3 {
		switch parts[0] + "." + parts[1] {
		case "1.0":
			return false, nil
		case string(a2av0.Version):
			return true, nil
		}
	}
	return false, fmt.Errorf("%w: A2A-Version %q: this agent speaks A2A 1.0 and 0.3: send one of them", sdk.ErrVersionNotSupported, clip(v, 32))
}

// refuse returns a handler of the binding that answers every request with
// err, in the binding's form.
func refuse(isREST bool, err error) http.Handler {
	if isREST {
		return http.StripPrefix("/rest", a2asrv.NewRESTHandler(refusing{err}))
	}
	return a2asrv.NewJSONRPCHandler(refusing{err})
}

// refusing is a request handler that refuses every request with err.
type refusing struct{ err error }

func (f refusing) GetTask(context.Context, *sdk.GetTaskRequest) (*sdk.Task, error) {
	return nil, f.err
}

func (f refusing) ListTasks(context.Context, *sdk.ListTasksRequest) (*sdk.ListTasksResponse, error) {
	return nil, f.err
}

func (f refusing) CancelTask(context.Context, *sdk.CancelTaskRequest) (*sdk.Task, error) {
	return nil, f.err
}

func (f refusing) SendMessage(context.Context, *sdk.SendMessageRequest) (sdk.SendMessageResult, error) {
	return nil, f.err
}

func (f refusing) SubscribeToTask(context.Context, *sdk.SubscribeToTaskRequest) iter.Seq2[sdk.Event, error] {
	return refused(f.err)
}

func (f refusing) SendStreamingMessage(context.Context, *sdk.SendMessageRequest) iter.Seq2[sdk.Event, error] {
	return refused(f.err)
}

func (f refusing) GetTaskPushConfig(context.Context, *sdk.GetTaskPushConfigRequest) (*sdk.PushConfig, error) {
	return nil, f.err
}

func (f refusing) ListTaskPushConfigs(context.Context, *sdk.ListTaskPushConfigRequest) (*sdk.ListTaskPushConfigResponse, error) {
	return nil, f.err
}

func (f refusing) CreateTaskPushConfig(context.Context, *sdk.PushConfig) (*sdk.PushConfig, error) {
	return nil, f.err
}

func (f refusing) DeleteTaskPushConfig(context.Context, *sdk.DeleteTaskPushConfigRequest) error {
	return f.err
}

func (f refusing) GetExtendedAgentCard(context.Context, *sdk.GetExtendedAgentCardRequest) (*sdk.AgentCard, error) {
	return nil, f.err
}

// CardMaxAge is how long a client or cache may keep the agent card a
// Server serves before it asks again (its Cache-Control max-age). The
// card changes only with the server's options.
const CardMaxAge = 5 * time.Minute

// serveCard serves the agent card, in the form both A2A 1.0 and 0.3
// clients read, with the headers that let it be cached: Cache-Control
// with a max-age, an ETag of its bytes, and 304 Not Modified to a request
// that names that ETag (If-None-Match).
func (s *Server) serveCard(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		httpError(w, http.StatusMethodNotAllowed, "the agent card is read with GET")
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	body, err := cardJSON(s.Card(scheme + "://" + r.Host))
	if err != nil {
		s.cfg.logger.Error("a2a: the agent card cannot be encoded", "err", err)
		httpError(w, http.StatusInternalServerError, "the agent card cannot be encoded: the server logged why")
		return
	}
	sum := sha256.Sum256(body)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Cache-Control", fmt.Sprintf("public, max-age=%d", int(CardMaxAge.Seconds())))
	h.Set("ETag", `"`+hex.EncodeToString(sum[:16])+`"`)
	// ServeContent answers If-None-Match with 304, and HEAD with no body.
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

// cardJSON encodes card as both versions of the protocol read it: A2A
// 1.0's fields, and 0.3's (url, preferredTransport, protocolVersion …)
// beside them. A card that declares security schemes is in 1.0's form
// alone: 0.3 writes them under the same name in another shape, which 1.0
// clients cannot read (a 0.3 client of such a server is given its URL).
func cardJSON(card *sdk.AgentCard) ([]byte, error) {
	if len(card.SecuritySchemes) > 0 {
		return json.Marshal(card)
	}
	p, ok := a2av0.NewStaticAgentCardProducer(card).(interface {
		CardJSON(context.Context) ([]byte, error)
	})
	if !ok {
		return json.Marshal(card)
	}
	return p.CardJSON(context.Background())
}
