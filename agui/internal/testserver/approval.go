package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/agui/internal/approvaltree"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
)

// approvalHandler serves the approval tree on threads stored in AGUI_STORE.
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
	return h, func() { st.Close(); cleanup() }, nil
}
