package a2a

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/a2aproject/a2a-go/v2/a2asrv/taskstore"

	"github.com/deputy-go/deputy/store"
)

// taskStore keeps the A2A tasks of a Server in deputy's store, one record
// per task under its owner, so that tasks — and the questions a suspended
// one waits on — survive a restart, and one owner's tasks are out of
// another's reach: a task is looked up under the owner of the request,
// never across owners.
type taskStore struct {
	st   *store.Store
	log  *slog.Logger  // where a failure of the store is told whole
	seen *seenMessages // the tasks first messages started, by message id
}

var _ taskstore.Store = taskStore{}

// maxIDBytes bounds a task or context id a client sends (the server makes
// UUIDs; a longer one names no task).
const maxIDBytes = 128

// taskPrefix is where the tasks of owner are kept.
func taskPrefix(owner string) string {
	return "a2a/tasks/" + escapeKey(owner) + "/"
}

// escapeKey makes an owner or id one segment of a store key: printable
// text as it is, but for "%" and "/", which it escapes as a URL does,
// and so every byte of a control character or of invalid UTF-8, which a
// store key cannot hold. A segment longer than maxIDBytes is replaced by
// a hash ("%h" and hex, which no escaped text reads as), keeping keys
// within the store's bound. No two names share a segment.
func escapeKey(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == '%' || r == '/' || r < 0x20 || r == 0x7f || (r == utf8.RuneError && n == 1) {
			for _, c := range []byte(s[i : i+n]) {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	if b.Len() > maxIDBytes {
		sum := sha256.Sum256([]byte(s))
		return "%h" + hex.EncodeToString(sum[:16])
	}
	return b.String()
}

func (s taskStore) key(ctx context.Context, id sdk.TaskID) (string, error) {
	if id == "" || len(id) > maxIDBytes {
		return "", sdk.ErrTaskNotFound
	}
	return taskPrefix(ownerFrom(ctx)) + escapeKey(string(id)), nil
}

func (s taskStore) Create(ctx context.Context, task *sdk.Task) (taskstore.TaskVersion, error) {
	k, err := s.key(ctx, task.ID)
	if err != nil {
		return 0, err
	}
	b, err := json.Marshal(task)
	if err != nil {
		return 0, err
	}
	switch err := s.st.Put(ctx, k, b, 0); {
	case errors.Is(err, store.ErrConflict):
		return 0, taskstore.ErrTaskAlreadyExists
	case err != nil:
		return 0, hide(s.log, fmt.Sprintf("storing task %s", task.ID), err)
	}
	if len(task.History) > 0 && task.History[0] != nil && task.History[0].Role == sdk.MessageRoleUser {
		owner, id := ownerFrom(ctx), task.History[0].ID
		if c := claimFrom(ctx); c != nil && c.key == seenKey(owner, id) {
			c.resolve(ctx, task.ID)
		} else {
			s.seen.remember(ctx, owner, id, task.ID)
		}
	}
	return 1, nil
}

func (s taskStore) Update(ctx context.Context, req *taskstore.UpdateRequest) (taskstore.TaskVersion, error) {
	k, err := s.key(ctx, req.Task.ID)
	if err != nil {
		return 0, err
	}
	b, err := json.Marshal(req.Task)
	if err != nil {
		return 0, err
	}
	prev := int64(req.PrevVersion)
	if req.PrevVersion == taskstore.TaskVersionMissing {
		_, v, err := s.st.Get(ctx, k)
		if err != nil {
			return 0, s.notFound(err, req.Task.ID)
		}
		prev = v
	}
	switch err := s.st.Put(ctx, k, b, prev); {
	case errors.Is(err, store.ErrConflict):
		if _, _, gerr := s.st.Get(ctx, k); errors.Is(gerr, store.ErrNotFound) {
			return 0, sdk.ErrTaskNotFound
		}
		return 0, taskstore.ErrConcurrentModification
	case err != nil:
		return 0, hide(s.log, fmt.Sprintf("storing task %s", req.Task.ID), err)
	}
	return taskstore.TaskVersion(prev + 1), nil
}

func (s taskStore) Get(ctx context.Context, id sdk.TaskID) (*taskstore.StoredTask, error) {
	k, err := s.key(ctx, id)
	if err != nil {
		return nil, err
	}
	b, v, err := s.st.Get(ctx, k)
	if err != nil {
		return nil, s.notFound(err, id)
	}
	var t sdk.Task
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("a2a: task %s is stored damaged: %w", id, err)
	}
	return &taskstore.StoredTask{Task: &t, Version: taskstore.TaskVersion(v), User: ownerFrom(ctx)}, nil
}

func (s taskStore) notFound(err error, id sdk.TaskID) error {
	if errors.Is(err, store.ErrNotFound) {
		return sdk.ErrTaskNotFound
	}
	return hide(s.log, fmt.Sprintf("reading task %s", id), err)
}

// Bounds of a page of ListTasks.
const (
	defaultListPage = 50
	maxListPage     = 100
)

// List lists the owner's tasks that pass the request's filters, a page
// at a time, in the order of their ids (the SDK's ids, UUIDv7, sort by
// when they were made). It reads every one of the owner's tasks when a
// filter needs their contents, and only their keys otherwise, so that
// TotalSize counts all that pass and each page is full but the last.
func (s taskStore) List(ctx context.Context, req *sdk.ListTasksRequest) (*sdk.ListTasksResponse, error) {
	size := req.PageSize
	switch {
	case size == 0:
		size = defaultListPage
	case size < 0 || size > maxListPage:
		return nil, fmt.Errorf("%w: pageSize %d: give 1 to %d", sdk.ErrInvalidParams, size, maxListPage)
	}
	prefix := taskPrefix(ownerFrom(ctx))
	after := ""
	if req.PageToken != "" {
		id, ok := pageTokenID(ownerFrom(ctx), req.PageToken)
		if !ok {
			return nil, fmt.Errorf("%w: pageToken is not one this server gave: send the nextPageToken of the page before, or none", sdk.ErrInvalidParams)
		}
		after = prefix + escapeKey(id)
	}
	filtered := req.ContextID != "" || req.Status != sdk.TaskStateUnspecified || req.StatusTimestampAfter != nil
	resp := &sdk.ListTasksResponse{Tasks: []*sdk.Task{}, PageSize: size}
	more := false
	for from := ""; ; {
		keys, err := s.st.Keys(ctx, prefix, from, store.MaxPage)
		if err != nil {
			return nil, hide(s.log, "listing tasks", err)
		}
		for _, k := range keys {
			inPage := k > after
			if !filtered && !(inPage && len(resp.Tasks) < size) {
				resp.TotalSize++
				more = more || inPage
				continue
			}
			t, err := s.read(ctx, k)
			if err != nil {
				return nil, err
			}
			if t == nil || !listed(t, req) {
				continue
			}
			resp.TotalSize++
			switch {
			case !inPage:
			case len(resp.Tasks) < size:
				resp.Tasks = append(resp.Tasks, trimmed(t, req))
			default:
				more = true
			}
		}
		if len(keys) < store.MaxPage {
			break
		}
		from = keys[len(keys)-1]
	}
	if more {
		resp.NextPageToken = pageToken(ownerFrom(ctx), resp.Tasks[len(resp.Tasks)-1].ID)
	}
	return resp, nil
}

// read returns the task stored under k, or nil when it is gone or cannot
// be read as a task.
func (s taskStore) read(ctx context.Context, k string) (*sdk.Task, error) {
	b, _, err := s.st.Get(ctx, k)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, hide(s.log, "listing tasks", err)
	}
	var t sdk.Task
	if json.Unmarshal(b, &t) != nil {
		return nil, nil
	}
	return &t, nil
}

// listed reports whether t passes the request's filters.
func listed(t *sdk.Task, req *sdk.ListTasksRequest) bool {
	if req.ContextID != "" && t.ContextID != req.ContextID {
		return false
	}
	if req.Status != sdk.TaskStateUnspecified && t.Status.State != req.Status {
		return false
	}
	if at := req.StatusTimestampAfter; at != nil && t.Status.Timestamp != nil && t.Status.Timestamp.Before(*at) {
		return false
	}
	return true
}

// trimmed is t as the request lists it: its artifacts only when asked
// for, its history cut to the length asked for, as GetTask cuts it.
func trimmed(t *sdk.Task, req *sdk.ListTasksRequest) *sdk.Task {
	if !req.IncludeArtifacts {
		t.Artifacts = nil
	}
	if n := req.HistoryLength; n != nil && *n >= 0 && *n < len(t.History) {
		t.History = t.History[len(t.History)-*n:]
	}
	return t
}

// pageToken is owner's token of a page that ends with the task id: the id,
// and a check that ties it to the owner, so that a token made up, damaged
// or another owner's is refused rather than read as a place to list from.
// (The check is no secret: a token forged with it lists nothing more
// than the owner's own tasks.)
func pageToken(owner string, id sdk.TaskID) string {
	return base64.RawURLEncoding.EncodeToString([]byte(id)) + "." + pageCheck(owner, string(id))
}

func pageCheck(owner, id string) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("a2a page %d:%s%s", len(owner), owner, id)))
	return hex.EncodeToString(sum[:6])
}

// pageTokenID reads the id an owner's page token ends at, reporting false
// for a token pageToken did not make for that owner.
func pageTokenID(owner, token string) (string, bool) {
	enc, check, ok := strings.Cut(token, ".")
	if !ok || len(enc) > 2*maxIDBytes {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(b) == 0 || len(b) > maxIDBytes || !utf8.Valid(b) {
		return "", false
	}
	for _, r := range string(b) {
		if r < 0x20 || r == 0x7f {
			return "", false
		}
	}
	if subtle.ConstantTimeCompare([]byte(check), []byte(pageCheck(owner, string(b)))) != 1 {
		return "", false
	}
	return string(b), true
}

// ownedTasks is the request handler a Server serves: the SDK's, behind a
// check that a request naming a task names one of its owner's. The SDK
// keeps the tasks it is running by id alone, across owners, so that
// without the check a request naming another owner's running task
// reaches it: a subscription is sent its events, a cancellation is queued
// beside its owner's, a message is told the task is busy. Each is told
// instead that there is no such task, as for a task that is not running.
// It also refuses a message holding a null part, which the SDK cannot
// copy: a new task would fail with an internal error, and a waiting one
// would be failed by the answer.
type ownedTasks struct {
	a2asrv.RequestHandler
	tasks taskStore
	// room reports whether the server's runs leave room for another of
	// the owner's (Server.room).
	room func(owner string) bool
}

// own reports whether the task id names is the request's owner's.
func (h ownedTasks) own(ctx context.Context, id sdk.TaskID) error {
	if id == "" {
		return nil // the SDK refuses the request, or makes a task
	}
	_, err := h.tasks.Get(ctx, id)
	return err
}

func (h ownedTasks) message(ctx context.Context, req *sdk.SendMessageRequest) error {
	if req == nil || req.Message == nil {
		return nil // the SDK refuses the request
	}
	for i, p := range req.Message.Parts {
		if p == nil {
			return fmt.Errorf("%w: part %d of the message is null", sdk.ErrInvalidParams, i)
		}
		if err := readable(p); err != nil {
			return fmt.Errorf("%w: part %d of the message is %v: this agent reads text and JSON data (text/plain, application/json): send the content as text, or leave the part out", sdk.ErrUnsupportedContentType, i, err)
		}
	}
	return h.own(ctx, req.Message.TaskID)
}

// readable reports, as an error that says what the part is, a part the
// served agent cannot read: it reads text (text/* or JSON) and JSON data,
// not files, whether sent whole or by URL. A part is never dropped: a
// message that holds one it cannot read is refused whole.
func readable(p *sdk.Part) error {
	mt := strings.ToLower(strings.TrimSpace(p.MediaType))
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = strings.TrimSpace(mt[:i])
	}
	json := mt == "" || mt == "application/json" || strings.HasSuffix(mt, "+json")
	switch p.Content.(type) {
	case sdk.Text:
		if json || strings.HasPrefix(mt, "text/") {
			return nil
		}
		return fmt.Errorf("text of type %q", clip(mt, 64))
	case sdk.Data:
		if json {
			return nil
		}
		return fmt.Errorf("data of type %q", clip(mt, 64))
	case sdk.Raw, sdk.URL:
		return fmt.Errorf("a file of type %q", clip(cmp.Or(mt, "unknown"), 64))
	}
	return fmt.Errorf("a part of no known kind")
}

func (h ownedTasks) SendMessage(ctx context.Context, req *sdk.SendMessageRequest) (sdk.SendMessageResult, error) {
	if err := h.message(ctx, req); err != nil {
		return nil, err
	}
	t, c, err := h.first(ctx, req)
	if err != nil {
		return nil, err
	}
	if t != nil {
		if (req.Config != nil && req.Config.ReturnImmediately) || !running(t.Status.State) {
			return t, nil
		}
		// Answered when the task ends or waits, as the message was.
		for _, err := range h.SubscribeToTask(ctx, &sdk.SubscribeToTaskRequest{ID: t.ID}) {
			if err != nil {
				break
			}
		}
		now, err := h.tasks.Get(ctx, t.ID)
		if err != nil {
			return nil, err
		}
		return now.Task, nil
	}
	if c != nil {
		ctx = withClaim(ctx, c)
		defer c.release(ctx, true)
	}
	res, err := h.RequestHandler.SendMessage(ctx, req)
	for pause := boundPause; h.again(ctx, err, pause); pause *= 2 {
		res, err = h.RequestHandler.SendMessage(ctx, req)
	}
	return res, err
}

// The pauses before a message refused at WithMaxRuns's bound is sent to
// the SDK again (ownedTasks.again): 5+10+…+160 ms, about a third of a
// second.
const (
	boundPause    = 5 * time.Millisecond
	maxBoundPause = 160 * time.Millisecond
)

// again reports, after a pause, whether a message the SDK refused with err
// is to be sent to it again: when err refuses it at WithMaxRuns's bound,
// and the server's own count of runs in progress leaves room for it. The
// SDK counts a run until it has put it away, after the run's client has
// read its end, so that a client's next message, sent as soon as the run
// it followed ended, can find that run still counted.
func (h ownedTasks) again(ctx context.Context, err error, pause time.Duration) bool {
	if err == nil || pause > maxBoundPause || !strings.Contains(err.Error(), "concurrency quota exceeded") {
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(pause):
	}
	return h.room(ownerFrom(ctx))
}

func (h ownedTasks) SendStreamingMessage(ctx context.Context, req *sdk.SendMessageRequest) iter.Seq2[sdk.Event, error] {
	if err := h.message(ctx, req); err != nil {
		return refused(err)
	}
	return func(yield func(sdk.Event, error) bool) {
		t, c, err := h.first(ctx, req)
		switch {
		case err != nil:
			yield(nil, err)
			return
		case t != nil && !running(t.Status.State):
			yield(t, nil)
			return
		case t != nil:
			first := true
			for ev, err := range h.SubscribeToTask(ctx, &sdk.SubscribeToTaskRequest{ID: t.ID}) {
				if first && err != nil {
					// Its run ended since the task was read, or runs on
					// another server on the store, or that server stopped
					// mid-run. The task as it stands.
					if now, gerr := h.tasks.Get(ctx, t.ID); gerr == nil {
						t = now.Task
					}
					yield(t, nil)
					return
				}
				first = false
				if !yield(ev, err) {
					return
				}
			}
			return
		}
		rctx := ctx
		if c != nil {
			rctx = withClaim(ctx, c)
			defer c.release(rctx, true)
		}
		for pause := boundPause; ; pause *= 2 {
			first, refused := true, false
			for ev, err := range h.RequestHandler.SendStreamingMessage(rctx, req) {
				if first && err != nil && h.again(rctx, err, pause) {
					refused = true
					break
				}
				first = false
				if !yield(ev, err) {
					return
				}
			}
			if !refused {
				return
			}
		}
	}
}

// first settles what a message sent without a taskId starts. It returns
// the task of the request's owner that a message with the request's
// messageId and parts started, when the request sends it again (its
// sender did not learn of the task: its process died, or the connection
// broke) and the server remembers it; then the message starts nothing.
// Otherwise it returns the claim on the message's id under which the
// message starts its task (nil for a message whose id names another
// message's task: a client that reuses its ids gets a task of its own).
// A copy of the message that comes while the claim's task starts waits
// for it (until ctx ends) and is answered with it, as a copy sent later
// is. Only the owner's own messages are looked up, after Authorize named
// the owner: another's messageId, guessed or seen, names nothing.
func (h ownedTasks) first(ctx context.Context, req *sdk.SendMessageRequest) (*sdk.Task, *claim, error) {
	if req == nil || req.Message == nil || req.Message.TaskID != "" || req.Message.ID == "" {
		return nil, nil, nil
	}
	owner := ownerFrom(ctx)
	var failed sdk.TaskID
	for {
		mine, id, other, err := h.tasks.seen.claim(ctx, owner, req.Message.ID, failed)
		switch {
		case err != nil:
			return nil, nil, err
		case mine != nil:
			return nil, mine, nil
		case other != nil:
			if err := other.wait(ctx); err != nil {
				return nil, nil, err
			}
			continue
		}
		st, err := h.tasks.Get(ctx, id)
		if err != nil && ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if err == nil {
			// A message that says something else under the id is not the
			// one sent again: a client that reuses its ids gets a task of
			// its own.
			first := firstUserMessage(st.Task)
			if first == nil || !sameParts(first.Parts, req.Message.Parts) {
				return nil, nil, nil
			}
			if s := st.Task.Status.State; s != sdk.TaskStateFailed && s != sdk.TaskStateCanceled {
				return st.Task, nil, nil
			}
		}
		// A task that failed or was cancelled did not do the work, and one
		// that cannot be read does none: the message sent again is a new
		// try, which claims the id in that task's place and whose task it
		// follows from now on.
		if id == failed {
			return nil, nil, nil
		}
		failed = id
	}
}

// sameParts reports whether two messages' parts are the same on the wire.
func sameParts(a, b []*sdk.Part) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}

// running reports whether a task in state has a run in progress, or one
// about to start.
func running(state sdk.TaskState) bool {
	return !state.Terminal() && !waitsForInput(state)
}

// CancelTask cancels a task of the request's owner. A client that cancels
// a task as soon as it reads the task's question can reach the SDK before
// it has put away the run that asked: the SDK then hands the cancellation
// to that run, which has ended, and refuses it as not cancelable though
// the task waits for input, which is cancelable. Such a refusal is tried
// again, a few times over about a quarter of a second, while the stored
// task still waits for input.
func (h ownedTasks) CancelTask(ctx context.Context, req *sdk.CancelTaskRequest) (*sdk.Task, error) {
	if req == nil {
		return h.RequestHandler.CancelTask(ctx, req)
	}
	if err := h.own(ctx, req.ID); err != nil {
		return nil, err
	}
	pause := 2 * time.Millisecond
	for try := 0; ; try++ {
		task, err := h.RequestHandler.CancelTask(ctx, req)
		if !errors.Is(err, sdk.ErrTaskNotCancelable) || try == cancelTries-1 {
			return task, err
		}
		st, gerr := h.tasks.Get(ctx, req.ID)
		if gerr != nil || !waitsForInput(st.Task.Status.State) {
			return task, err
		}
		select {
		case <-ctx.Done():
			return task, err
		case <-time.After(pause):
		}
		pause *= 2
	}
}

// cancelTries bounds CancelTask's tries: 2+4+…+128 ms of pauses between
// them, about a quarter of a second.
const cancelTries = 8

// SubscribeToTask follows a task's run, as the SDK does; it also answers
// what the SDK cannot. A task that ended has nothing more to send: that is
// refused as an unsupported operation, as the protocol has it, not as a
// missing task. A task that waits for input has no run in progress until
// its answer comes: its stream is the task as stored, and ends there, as a
// run's stream ends when its task comes to wait.
func (h ownedTasks) SubscribeToTask(ctx context.Context, req *sdk.SubscribeToTaskRequest) iter.Seq2[sdk.Event, error] {
	if req == nil {
		return h.RequestHandler.SubscribeToTask(ctx, req)
	}
	stored, err := h.tasks.Get(ctx, req.ID)
	if err != nil {
		return refused(err)
	}
	if state := stored.Task.Status.State; state.Terminal() {
		return refused(fmt.Errorf("%w: task %s is %s: a task that ended sends no more updates: read it with GetTask", sdk.ErrUnsupportedOperation, req.ID, stateName(state)))
	}
	if waitsForInput(stored.Task.Status.State) {
		// Stored as waiting: its run has stopped, or is stopping. The
		// SDK's subscription to a run caught as it unregisters can miss
		// its end and wait on until the client gives up, so the stream
		// is the stored task alone.
		return func(yield func(sdk.Event, error) bool) { yield(stored.Task, nil) }
	}
	return func(yield func(sdk.Event, error) bool) {
		first := true
		for ev, err := range h.RequestHandler.SubscribeToTask(ctx, req) {
			if first && errors.Is(err, sdk.ErrTaskNotFound) {
				// No run in progress: the task as it is stored now.
				now, gerr := h.tasks.Get(ctx, req.ID)
				switch {
				case gerr != nil:
					yield(nil, gerr)
				case waitsForInput(now.Task.Status.State):
					yield(now.Task, nil)
				case now.Task.Status.State.Terminal():
					// It ended in between: its last state, as for a run.
					yield(now.Task, nil)
				default:
					yield(nil, err)
				}
				return
			}
			first = false
			if !yield(ev, err) {
				return
			}
		}
	}
}

// waitsForInput reports whether a task in state waits for a client's
// message: no run of it is in progress.
func waitsForInput(state sdk.TaskState) bool {
	return state == sdk.TaskStateInputRequired || state == sdk.TaskStateAuthRequired
}

func refused(err error) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) { yield(nil, err) }
}
