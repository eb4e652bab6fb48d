package agui

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/deputy-go/deputy/store"
)

// Authorize decides, from a request, who its caller is and whether the
// caller may use the thread it names. It returns the thread's owner: the
// name under which the handler keeps the thread (a user id, or a team's
// when a team shares its threads). Threads are kept per owner, so the same
// threadId of two owners names two threads.
//
// It runs before the handler locks, reads or mentions any state of the
// thread, and before the Builder. To refuse the request it returns an
// error: a *Refusal is answered with its own status and body, any other
// error with 403 and {"error": <its text>}. A refused caller learns only
// what the refusal says. threadID is "" for a request that names no
// thread (listing an owner's threads through Threads).
//
// Identity usually comes from middleware in front of the handler, which
// puts the user in r.Context(); Authorize reads it from there.
type Authorize func(r *http.Request, threadID string) (owner string, err error)

// Refusal is an error with which an Authorize function answers a request
// itself: the handler writes Status, Header and Body as they are.
type Refusal struct {
	// Status is the response's status code; 0 is 403 Forbidden.
	Status int
	// Header is added to the response's header, such as WWW-Authenticate.
	Header http.Header
	// Body is the response body, written as it is; nil is the status's
	// text as {"error":"Forbidden"} is. Set Content-Type in Header for
	// any other body.
	Body []byte
}

func (r *Refusal) Error() string {
	return "agui: the request was refused with status " + strconv.Itoa(r.status())
}

func (r *Refusal) status() int {
	if r.Status == 0 {
		return http.StatusForbidden
	}
	return r.Status
}

// MaxOwnerBytes bounds an owner an Authorize function returns.
const MaxOwnerBytes = 128

// WithAuthorize has fn decide who may use each thread, before anything of
// the thread is read, and keeps threads per owner.
//
// Without it every request is the owner "", and a threadId is a bearer
// secret: whoever knows it (from a shared link, a log line, a browser's
// history) continues the thread, reads it through the agent and answers
// its interrupts. Serve more than one user only with WithAuthorize, or
// behind something that does the same.
func WithAuthorize(fn Authorize) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("WithAuthorize(nil): pass a function that names the caller's owner, or refuses the request")
		}
		c.authorize = fn
		return nil
	}
}

// ScopeForgetter is a resident that keeps conversations per scope in
// memory, such as a *subagent.SubAgentTool built with FromScoped.
type ScopeForgetter interface {
	ForgetScope(scope string)
}

// WithScopedResidents names the residents scoped per thread
// (subagent.PerThread) that keep their conversations in this process's
// memory, so that DeleteThread forgets the thread's conversation in each,
// as it deletes what such residents keep in the store. Without it a
// deleted thread's in-memory conversation lives on until it is evicted
// (subagent.WithMaxScopes).
func WithScopedResidents(rs ...ScopeForgetter) Option {
	return func(c *config) error {
		for i, r := range rs {
			if r == nil {
				return fmt.Errorf("WithScopedResidents: resident %d is nil", i)
			}
		}
		c.residents = append(c.residents, rs...)
		return nil
	}
}

// authorize runs the handler's Authorize for the request and thread: it
// answers a refused request itself and reports false.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request, threadID string) (owner string, ok bool) {
	if h.cfg.authorize == nil {
		return "", true
	}
	owner, err := h.cfg.authorize(r, threadID)
	if err == nil && len(owner) > MaxOwnerBytes {
		h.logger().Error("agui: Authorize returned an owner too long to keep threads under", "bytes", len(owner), "max", MaxOwnerBytes)
		httpError(w, http.StatusInternalServerError, fmt.Sprintf("agui: the server's Authorize named an owner of %d bytes (at most %d): hash it", len(owner), MaxOwnerBytes))
		return "", false
	}
	if err == nil {
		return owner, true
	}
	var ref *Refusal
	if !errors.As(err, &ref) {
		httpError(w, http.StatusForbidden, err.Error())
		return "", false
	}
	for k, vs := range ref.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if ref.Body == nil {
		httpError(w, ref.status(), http.StatusText(ref.status()))
		return "", false
	}
	w.WriteHeader(ref.status())
	_, _ = w.Write(ref.Body)
	return "", false
}

// thread names one stored thread: its owner and the client's threadId.
type thread struct{ owner, id string }

// name encodes the pair unambiguously: each part is preceded by its
// length, so no other pair, and no prefix of another, reads the same.
func (t thread) name() string {
	return ownerName(t.owner) + strconv.Itoa(len(t.id)) + ":" + t.id
}

// ownerName is what the names of an owner's threads start with, and no
// other owner's.
func ownerName(owner string) string {
	return strconv.Itoa(len(owner)) + ":" + owner + "/"
}

// Store keys of a thread's records. The conversation's key doubles as the
// thread's lock, and ends with the threadId as it is, so that an owner's
// threads list in id order; the suspended run's is the longest, and bounds
// the threadId a stored thread may have.
func (t thread) key() string          { return threadPrefix + ownerName(t.owner) + t.id }
func (t thread) suspendedKey() string { return suspendedPrefix + t.name() }

const (
	threadPrefix    = "thread/"
	suspendedPrefix = "suspended/"
)

// check refuses a threadId too long for the thread's keys.
func (t thread) check() error {
	if n := len(t.suspendedKey()); n > store.MaxKeyBytes {
		return &threadError{http.StatusBadRequest, fmt.Errorf("threadId is %d bytes: a stored thread's may have at most %d", len(t.id), len(t.id)-(n-store.MaxKeyBytes))}
	}
	return nil
}

// scope is the thread's name for what is kept per thread beside it (see
// agent.WithThread, store.ScopeKey).
func (t thread) scope() string { return "agui/" + t.name() }

// ThreadScope is the scope of owner's thread threadID: what is kept in
// the thread's store under store.ScopeKey(ThreadScope(owner, threadID),
// name) belongs to the thread, and DeleteThread deletes it with the
// thread. A resident scoped per thread (subagent.PerThread) keeps its
// conversation there, and so does a viewer of the thread's runs.
func ThreadScope(owner, threadID string) string { return thread{owner, threadID}.scope() }

// journalPrefix is what the journal names of the thread's runs start
// with, and no other thread's: DeleteThread forgets them all by it. A name
// too long to leave room for a run is hashed.
func (t thread) journalPrefix() string {
	p := "agui/" + t.name() + "/"
	if len(p) <= store.MaxKeyBytes-100 {
		return p
	}
	sum := sha256.Sum256([]byte(t.name()))
	return "agui/sha256:" + hex.EncodeToString(sum[:]) + "/"
}

// journalName is the name of the journal of run runID on the thread. The
// run's length comes first, so that no other run's name is the same and a
// hashed name (which starts with a letter) is never a short run id's.
func (t thread) journalName(runID string) string {
	name := t.journalPrefix() + strconv.Itoa(len(runID)) + ":" + runID
	if len(name) <= store.MaxKeyBytes {
		return name
	}
	sum := sha256.Sum256([]byte(runID))
	return t.journalPrefix() + "sha256:" + hex.EncodeToString(sum[:])
}
