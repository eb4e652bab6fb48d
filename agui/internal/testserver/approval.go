package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/agui/internal/approvaltree"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
)

// approvalHandler serves the approval tree on threads stored in AGUI_STORE,
// at /agui-approval, and on threads kept per user, at /agui-owned.
func approvalHandler() (http.Handler, func(), error) {
	path := os.Getenv("AGUI_STORE")
	cleanup := func() {}
	if path == "" {
		dir, err := os.MkdirTemp("", "agui-approval-")
		if err != nil {
			return nil, nil, err
		}
		path = filepath.Join(dir, "threads.db")
		cleanup = func() { os.RemoveAll(dir) }
	}
	b, err := sqlite.Open(path)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	st, err := store.New(b)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	var counts approvaltree.Counts
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return approvaltree.Build(&counts)
	}, agui.WithThreads(st))
	if err != nil {
		st.Close()
		cleanup()
		return nil, nil, err
	}
	owned, err := ownedHandler(st)
	if err != nil {
		st.Close()
		cleanup()
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/agui-approval", h)
	mux.Handle("/agui-owned", owned)
	mux.Handle("/agui-owned/", owned)
	return mux, func() { st.Close(); cleanup() }, nil
}

// ownedHandler serves the approval tree on threads kept per user, in st:
// the user is the bearer token ("Authorization: Bearer alice"), the
// first user of a threadId claims it, and another user is told the
// application's 404, nothing of the thread. Its threads' API is under
// /threads.
func ownedHandler(st *store.Store) (http.Handler, error) {
	var counts approvaltree.Counts
	var mu sync.Mutex
	owners := map[string]string{}
	authorize := func(r *http.Request, threadID string) (string, error) {
		user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || user == "" {
			return "", &agui.Refusal{Status: http.StatusUnauthorized, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"message":"sign in"}`)}
		}
		if threadID == "" {
			return user, nil
		}
		mu.Lock()
		defer mu.Unlock()
		if o, ok := owners[threadID]; ok && o != user {
			return "", &agui.Refusal{Status: http.StatusNotFound, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"message":"no such conversation"}`)}
		}
		owners[threadID] = user
		return user, nil
	}
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return approvaltree.Build(&counts)
	}, agui.WithThreads(st), agui.WithAuthorize(authorize))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/agui-owned", h)
	mux.Handle("/agui-owned/threads/", http.StripPrefix("/agui-owned/threads", h.Threads()))
	return mux, nil
}
