package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"

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
	st *store.Store
}

var _ taskstore.Store = taskStore{}

// maxIDBytes bounds a task or context id a client sends (the server makes
// UUIDs; a longer one names no task).
const maxIDBytes = 128

// taskPrefix is where the tasks of owner are kept.
func taskPrefix(owner string) string {
	return "a2a/tasks/" + escapeKey(owner) + "/"
}

// escapeKey keeps an owner or id from reaching into another's keys.
func escapeKey(s string) string {
	return strings.NewReplacer("%", "%25", "/", "%2F").Replace(s)
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
		return 0, fmt.Errorf("a2a: storing task %s: %w", task.ID, err)
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
		return 0, fmt.Errorf("a2a: storing task %s: %w", req.Task.ID, err)
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
	return fmt.Errorf("a2a: reading task %s: %w", id, err)
}

// List lists the owner's tasks, a page at a time, in the order of their
// ids; the filters apply within the page read.
func (s taskStore) List(ctx context.Context, req *sdk.ListTasksRequest) (*sdk.ListTasksResponse, error) {
	size := req.PageSize
	if size <= 0 {
		size = 50
	}
	size = min(size, 100)
	prefix := taskPrefix(ownerFrom(ctx))
	after := ""
	if req.PageToken != "" {
		if len(req.PageToken) > maxIDBytes*3 {
			return nil, fmt.Errorf("%w: pageToken is not one this server gave", sdk.ErrInvalidParams)
		}
		after = prefix + req.PageToken
	}
	keys, err := s.st.Keys(ctx, prefix, after, size)
	if err != nil {
		return nil, fmt.Errorf("a2a: listing tasks: %w", err)
	}
	resp := &sdk.ListTasksResponse{Tasks: []*sdk.Task{}, PageSize: size}
	for _, k := range keys {
		b, _, err := s.st.Get(ctx, k)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("a2a: listing tasks: %w", err)
		}
		var t sdk.Task
		if err := json.Unmarshal(b, &t); err != nil {
			continue
		}
		if (req.ContextID != "" && t.ContextID != req.ContextID) || (req.Status != "" && t.Status.State != req.Status) {
			continue
		}
		if !req.IncludeArtifacts {
			t.Artifacts = nil
		}
		resp.Tasks = append(resp.Tasks, &t)
	}
	resp.TotalSize = len(resp.Tasks)
	if len(keys) == size {
		resp.NextPageToken = string(keys[len(keys)-1][len(prefix):])
	}
	return resp, nil
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
	}
	return h.own(ctx, req.Message.TaskID)
}

func (h ownedTasks) SendMessage(ctx context.Context, req *sdk.SendMessageRequest) (sdk.SendMessageResult, error) {
	if err := h.message(ctx, req); err != nil {
		return nil, err
	}
	return h.RequestHandler.SendMessage(ctx, req)
}

func (h ownedTasks) SendStreamingMessage(ctx context.Context, req *sdk.SendMessageRequest) iter.Seq2[sdk.Event, error] {
	if err := h.message(ctx, req); err != nil {
		return refused(err)
	}
	return h.RequestHandler.SendStreamingMessage(ctx, req)
}

func (h ownedTasks) CancelTask(ctx context.Context, req *sdk.CancelTaskRequest) (*sdk.Task, error) {
	if req != nil {
		if err := h.own(ctx, req.ID); err != nil {
			return nil, err
		}
	}
	return h.RequestHandler.CancelTask(ctx, req)
}

func (h ownedTasks) SubscribeToTask(ctx context.Context, req *sdk.SubscribeToTaskRequest) iter.Seq2[sdk.Event, error] {
	if req != nil {
		if err := h.own(ctx, req.ID); err != nil {
			return refused(err)
		}
	}
	return h.RequestHandler.SubscribeToTask(ctx, req)
}

func refused(err error) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) { yield(nil, err) }
}
