package agui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

// ErrNoThreads is the error of a thread operation on a handler without
// WithThreads, which keeps no threads.
var ErrNoThreads = errors.New("agui: the handler keeps no threads: serve it WithThreads")

// ErrNoThread is the error of reading a thread its owner does not have.
var ErrNoThread = errors.New("agui: no such thread")

// Thread is a stored thread as ReadThread returns it.
type Thread struct {
	// ID is the client's threadId.
	ID string
	// Messages is the conversation, oldest first. While a run waits for
	// answers it ends with the message that started that run.
	Messages []provider.Message
	// Interrupts are what the thread's suspended run waits for; the next
	// request on the thread must answer them (see WithThreads).
	Interrupts []tool.Interrupt
}

// ThreadPage is one page of an owner's threads, from ListThreads.
type ThreadPage struct {
	// Threads are thread ids, in byte order.
	Threads []string
	// Next is the after of the next page; "" on the last page.
	Next string
}

// DefaultPage is the page size of ListThreads given 0, and of the HTTP
// listing without a limit.
const DefaultPage = 50

// ListThreads returns one page of owner's stored threads: at most limit (0
// is DefaultPage, at most store.MaxPage), those whose ids sort after after
// ("": from the first). It reads no conversation.
func (h *Handler) ListThreads(ctx context.Context, owner, after string, limit int) (ThreadPage, error) {
	st := h.cfg.threads
	if st == nil {
		return ThreadPage{}, ErrNoThreads
	}
	switch {
	case limit == 0:
		limit = DefaultPage
	case limit < 0 || limit > store.MaxPage:
		return ThreadPage{}, &threadError{http.StatusBadRequest, fmt.Errorf("a page of %d threads: ask for 1 to %d", limit, store.MaxPage)}
	}
	prefix := threadPrefix + ownerName(owner)
	from := ""
	if after != "" {
		from = prefix + after
		if len(from) > store.MaxKeyBytes {
			return ThreadPage{}, &threadError{http.StatusBadRequest, fmt.Errorf("after: %d bytes is longer than any thread id", len(after))}
		}
	}
	keys, err := st.Conversations(ctx, prefix, from, limit)
	if err != nil {
		return ThreadPage{}, storeError("", err)
	}
	p := ThreadPage{Threads: make([]string, len(keys))}
	for i, k := range keys {
		p.Threads[i] = k[len(prefix):]
	}
	if len(keys) == limit {
		p.Next = p.Threads[len(keys)-1]
	}
	return p, nil
}

// ReadThread returns owner's thread threadID as stored: its conversation
// and what a suspended run on it waits for. A thread owner does not have
// is ErrNoThread.
func (h *Handler) ReadThread(ctx context.Context, owner, threadID string) (Thread, error) {
	st := h.cfg.threads
	if st == nil {
		return Thread{}, ErrNoThreads
	}
	th := thread{owner, threadID}
	if err := th.check(); err != nil {
		return Thread{}, err
	}
	conv, err := st.Conversation(ctx, th.key())
	if err != nil {
		return Thread{}, storeError(threadID, err)
	}
	s, err := loadSuspended(ctx, st, th)
	if err != nil {
		return Thread{}, err
	}
	t := Thread{ID: threadID, Messages: conv.Messages}
	if s != nil {
		t.Messages, t.Interrupts = s.Input, s.Pending.Interrupts
	}
	if conv.Version == 0 && s == nil {
		return Thread{}, &threadError{http.StatusNotFound, fmt.Errorf("%w: %q", ErrNoThread, threadID)}
	}
	return t, nil
}

// DeleteThread forgets everything stored for owner's thread threadID: its
// conversation, the run suspended on it waiting for answers, if any, and
// the journals of its runs, and what residents scoped per thread keep for
// it: in the store (subagent.PerThread with WithStore), and in memory for
// the residents named by WithScopedResidents. It first stops this process's runs on the
// thread (as Stop does) and waits, within ctx, for a run on it elsewhere
// to end, so that no run stores the thread again after it is gone. A
// thread that does not exist is not an error.
func (h *Handler) DeleteThread(ctx context.Context, owner, threadID string) error {
	st := h.cfg.threads
	if st == nil {
		return ErrNoThreads
	}
	th := thread{owner, threadID}
	if err := th.check(); err != nil {
		return err
	}
	h.Stop(owner, threadID)
	lock, err := st.Lock(ctx, th.key())
	if err != nil {
		return storeError(threadID, err)
	}
	defer lock.Unlock()
	if err := forgetSuspended(ctx, st, th); err != nil {
		return err
	}
	if err := st.DeleteJournals(ctx, th.journalPrefix()); err != nil {
		return storeError(threadID, err)
	}
	if err := st.DeleteScope(ctx, th.scope()); err != nil {
		return storeError(threadID, err)
	}
	for _, r := range h.cfg.residents {
		r.ForgetScope(th.scope())
	}
	if err := st.DeleteConversation(ctx, th.key()); err != nil {
		return storeError(threadID, err)
	}
	return nil
}

// Threads returns the HTTP face of the handler's threads, for a chat page
// that lists its user's threads, reloads one, deletes one or stops its run.
// Mount it under a prefix with http.StripPrefix:
//
//	mux.Handle("/agui", h)
//	mux.Handle("/threads/", http.StripPrefix("/threads", h.Threads()))
//
// It answers, in JSON:
//
//	GET    /?after=ID&limit=N   {"threads":["t1",…],"next":"ID"}   (ListThreads)
//	GET    /{threadId}          {"threadId":…,"messages":[…],"interrupts":[…]}
//	DELETE /{threadId}          204                                (DeleteThread)
//	POST   /{threadId}/stop     {"stopped":true|false}            (Stop)
//
// Messages are AG-UI messages (id, role, content, toolCalls, toolCallId);
// interrupts are as a RUN_FINISHED outcome has them. Each request is
// authorized by WithAuthorize's function first, with the thread it names
// ("" for the listing), and a refused one learns nothing more. A thread
// id with "/" in it is sent escaped (%2F).
func (h *Handler) Threads() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.serveList)
	mux.HandleFunc("GET /{thread}", h.serveRead)
	mux.HandleFunc("DELETE /{thread}", h.serveDelete)
	mux.HandleFunc("POST /{thread}/stop", h.serveStop)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.admit(w, r) {
			mux.ServeHTTP(w, r)
		}
	})
}

func (h *Handler) serveList(w http.ResponseWriter, r *http.Request) {
	owner, ok := h.authorize(w, r, "")
	if !ok {
		return
	}
	limit := 0
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > store.MaxPage {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: send a number from 1 to %d", s, store.MaxPage))
			return
		}
		limit = n
	}
	p, err := h.ListThreads(r.Context(), owner, r.URL.Query().Get("after"), limit)
	if err != nil {
		httpError(w, threadStatus(err), err.Error())
		return
	}
	if p.Threads == nil {
		p.Threads = []string{}
	}
	writeJSON(w, http.StatusOK, struct {
		Threads []string `json:"threads"`
		Next    string   `json:"next,omitempty"`
	}{p.Threads, p.Next})
}

func (h *Handler) serveRead(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("thread")
	owner, ok := h.authorize(w, r, id)
	if !ok {
		return
	}
	t, err := h.ReadThread(r.Context(), owner, id)
	if err != nil {
		httpError(w, threadStatus(err), err.Error())
		return
	}
	ints := t.Interrupts
	if ints == nil {
		ints = []tool.Interrupt{}
	}
	writeJSON(w, http.StatusOK, struct {
		ThreadID   string           `json:"threadId"`
		Messages   []wireMessage    `json:"messages"`
		Interrupts []tool.Interrupt `json:"interrupts"`
	}{t.ID, wireMessages(t.Messages), ints})
}

func (h *Handler) serveDelete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("thread")
	owner, ok := h.authorize(w, r, id)
	if !ok {
		return
	}
	if err := h.DeleteThread(r.Context(), owner, id); err != nil {
		httpError(w, threadStatus(err), err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) serveStop(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("thread")
	owner, ok := h.authorize(w, r, id)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Stopped bool `json:"stopped"`
	}{h.Stop(owner, id)})
}

// wireMessage is a message as AG-UI sends it.
type wireMessage struct {
	ID         string         `json:"id"`
	Role       string         `json:"role"`
	Content    string         `json:"content,omitempty"`
	ToolCalls  []wireToolCall `json:"toolCalls,omitempty"`
	ToolCallID string         `json:"toolCallId,omitempty"`
	Error      string         `json:"error,omitempty"`
}

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// wireMessages gives stored messages AG-UI's form; a message's id is its
// place in the thread, the same on every read.
func wireMessages(msgs []provider.Message) []wireMessage {
	out := make([]wireMessage, len(msgs))
	for i, m := range msgs {
		w := wireMessage{ID: "msg_" + strconv.Itoa(i), Role: string(m.Role), Content: m.Content, ToolCallID: m.ToolCallID}
		if m.IsError {
			w.Error = m.Content
		}
		for _, c := range m.ToolCalls {
			var wc wireToolCall
			wc.ID, wc.Type = c.ID, "function"
			wc.Function.Name, wc.Function.Arguments = c.Name, string(c.Arguments)
			w.ToolCalls = append(w.ToolCalls, wc)
		}
		out[i] = w
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		httpError(w, http.StatusInternalServerError, "agui: encoding the answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// Sweep deletes what crashed runs left in the handler's store: the
// journals of runs that began more than age ago and are not suspended
// (a process killed mid-run leaves its run's journal; a run that ends
// deletes its own), and the suspended runs whose every interrupt has
// expired, with their journals, since no answer can resume them any
// more. It returns how many runs it forgot. A long-running server calls
// it now and then, such as hourly with store.DefaultJournalTTL; a run
// must end, or be suspended, within age.
func (h *Handler) Sweep(ctx context.Context, age time.Duration) (int, error) {
	st := h.cfg.threads
	if st == nil {
		return 0, ErrNoThreads
	}
	keep := map[string]bool{}
	forgot, after := 0, ""
	now := time.Now()
	for {
		keys, err := st.Keys(ctx, suspendedPrefix, after, store.MaxPage)
		if err != nil {
			return forgot, fmt.Errorf("agui: sweep: listing suspended runs: %w", err)
		}
		for _, k := range keys {
			data, _, err := st.Get(ctx, k)
			if errors.Is(err, store.ErrNotFound) {
				continue // resumed meanwhile
			}
			if err != nil {
				return forgot, fmt.Errorf("agui: sweep: %w", err)
			}
			var s suspendedRun
			if err := json.Unmarshal(data, &s); err != nil || !expired(s.Pending.Interrupts, now) {
				keep[s.Turn] = true // unreadable runs are left for DeleteThread
				continue
			}
			if err := st.DeleteJournal(ctx, s.Turn); err != nil {
				return forgot, fmt.Errorf("agui: sweep: %w", err)
			}
			if err := st.Delete(ctx, k); err != nil {
				return forgot, fmt.Errorf("agui: sweep: %w", err)
			}
			forgot++
		}
		if len(keys) < store.MaxPage {
			break
		}
		after = keys[len(keys)-1]
	}
	n, err := st.SweepJournals(ctx, "agui/", age, func(turn string) bool { return keep[turn] })
	return forgot + n, err
}

// expired reports whether every interrupt of a suspended run has expired.
func expired(its []tool.Interrupt, now time.Time) bool {
	for _, it := range its {
		if it.ExpiresAt.IsZero() || now.Before(it.ExpiresAt) {
			return false
		}
	}
	return len(its) > 0
}
