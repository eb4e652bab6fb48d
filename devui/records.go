package devui

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/store"
)

// The runs the viewer recorded of a thread are kept under the thread's
// scope (agui.ThreadScope), so that deleting the thread deletes them, each
// under its number, in the order they ended:
//
//	devui/last          the number of the last run recorded
//	devui/run/<number>  a run (runLog), the number in 20 digits
//	devui/id/<runId>    the number of the run runId (the last so named)
type records struct{ scope string }

func recordsOf(owner, thread string) records {
	scope := agui.ThreadScope(owner, thread)
	if !utf8.ValidString(scope) || strings.ContainsAny(scope, "\x00\x1f") {
		// A thread id the store cannot name: the AG-UI handler keeps no
		// such thread (it has no store, or refuses the id), so nothing
		// deletes its runs with it; they are kept under its hash.
		sum := sha256.Sum256([]byte(scope))
		scope = "devui/sha256:" + hex.EncodeToString(sum[:])
	}
	return records{scope}
}

func (rs records) last() string       { return store.ScopeKey(rs.scope, "devui/last") }
func (rs records) runs() string       { return store.ScopeKey(rs.scope, "devui/run/") }
func (rs records) run(n int64) string { return rs.runs() + fmt.Sprintf("%020d", n) }
func (rs records) number(key string) int64 {
	n, _ := strconv.ParseInt(strings.TrimPrefix(key, rs.runs()), 10, 64)
	return n
}

// id is where the number of the run runID is kept; a run id too long for a
// key is named by its hash.
func (rs records) id(runID string) string {
	name := url.PathEscape(runID)
	if len(name) > 200 {
		sum := sha256.Sum256([]byte(runID))
		name = "sha256:" + hex.EncodeToString(sum[:])
	}
	return store.ScopeKey(rs.scope, "devui/id/"+name)
}

// save records a run of owner's thread, after the others.
func (d *Handler) save(ctx context.Context, owner, thread string, l runLog) error {
	rs := recordsOf(owner, thread)
	v, err := json.Marshal(l)
	if err != nil {
		return err
	}
	n, err := d.next(ctx, rs)
	if err != nil {
		return err
	}
	if err := d.store.Put(ctx, rs.run(n), v, 0); err != nil {
		return err
	}
	return d.store.Put(ctx, rs.id(l.RunID), []byte(strconv.FormatInt(n, 10)), store.AnyVersion)
}

// next takes the number of the thread's next run.
func (d *Handler) next(ctx context.Context, rs records) (int64, error) {
	for range 100 {
		n, version, err := d.last(ctx, rs)
		if err != nil {
			return 0, err
		}
		err = d.store.Put(ctx, rs.last(), []byte(strconv.FormatInt(n+1, 10)), version)
		if errors.Is(err, store.ErrConflict) {
			continue // another run of the thread was recorded meanwhile
		}
		return n + 1, err
	}
	return 0, errors.New("the count of the thread's runs changed 100 times while one was recorded")
}

// last returns the number of the thread's last recorded run (0: none) and
// the version of its record.
func (d *Handler) last(ctx context.Context, rs records) (int64, int64, error) {
	v, version, err := d.store.Get(ctx, rs.last())
	if errors.Is(err, store.ErrNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 {
		return 0, 0, fmt.Errorf("the count of the thread's runs reads %.40q: delete the thread", v)
	}
	return n, version, nil
}

// defaultRunsPage is the runs of a page without a limit.
const defaultRunsPage = 20

// serveRuns answers one page of the recorded runs of a thread: the newest
// limit of those before the run numbered before (the newest without it),
// oldest first, and the before of the page of older runs, if any. Each
// record is read and written in turn, so that the response holds no more
// than one in memory. The caller must be one the AG-UI handler lets read
// the thread.
func (d *Handler) serveRuns(w http.ResponseWriter, r *http.Request) {
	thread := r.PathValue("thread")
	owner := ""
	if d.authorize != nil {
		var err error
		if owner, err = d.authorize(r, thread); err != nil {
			refuse(w, err)
			return
		}
	}
	limit, before := defaultRunsPage, int64(0)
	q := r.URL.Query()
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxRunsListed {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("limit %.40q: send a number from 1 to %d", s, MaxRunsListed))
			return
		}
		limit = n
	}
	if s := q.Get("before"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("before %.40q: send the older of the page before", s))
			return
		}
		before = n
	}
	if d.store == nil {
		writeJSON(w, map[string][]any{"runs": {}})
		return
	}
	rs := recordsOf(owner, thread)
	last, _, err := d.last(r.Context(), rs)
	if err != nil {
		httpError(w, http.StatusInternalServerError, "reading the thread's runs: "+err.Error())
		return
	}
	if before == 0 || before > last+1 {
		before = last + 1
	}
	from := max(1, before-int64(limit))
	keys, err := d.store.Keys(r.Context(), rs.runs(), rs.run(from-1), limit)
	if err != nil {
		httpError(w, http.StatusInternalServerError, "listing the thread's runs: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"runs":[`)
	written, failed := 0, ""
	for _, k := range keys {
		if rs.number(k) >= before || r.Context().Err() != nil {
			break
		}
		v, _, err := d.store.Get(r.Context(), k)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			failed = "reading a recorded run: " + err.Error()
			break
		}
		if !json.Valid(v) {
			continue
		}
		if written > 0 {
			io.WriteString(w, ",")
		}
		w.Write(v)
		written++
	}
	io.WriteString(w, "]")
	if from > 1 {
		fmt.Fprintf(w, `,"older":%d`, from)
	}
	if failed != "" {
		b, _ := json.Marshal(failed)
		fmt.Fprintf(w, `,"error":%s`, b)
	}
	io.WriteString(w, "}\n")
}

// maxTreeBytes bounds the events of a run and of the runs that resumed it,
// read to re-run a call of its tree.
const maxTreeBytes = 4 * MaxRunLogBytes

// runLog returns the record of the run runID of the thread, with the
// events of the runs that resumed it (each after the one before it ended
// waiting for answers) after its own: the tree the viewer draws from them.
func (d *Handler) runLog(ctx context.Context, owner, thread, runID string) (*runLog, error) {
	if d.store == nil {
		return nil, errors.New("runs are not recorded here (WithStore): leave fromRunId out")
	}
	rs := recordsOf(owner, thread)
	missing := fmt.Errorf("no recorded run %q in thread %q", runID, thread)
	v, _, err := d.store.Get(ctx, rs.id(runID))
	if errors.Is(err, store.ErrNotFound) {
		return nil, missing
	}
	if err != nil {
		return nil, err
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return nil, missing
	}
	tree, err := d.read(ctx, rs.run(n))
	if errors.Is(err, store.ErrNotFound) || (err == nil && tree.RunID != runID) {
		return nil, missing
	}
	if err != nil {
		return nil, err
	}
	size := eventsBytes(tree.Events)
	after := rs.run(n)
	for suspended(tree.Events) && !tree.Truncated {
		keys, err := d.store.Keys(ctx, rs.runs(), after, 10)
		if err != nil || len(keys) == 0 {
			return tree, err
		}
		for _, k := range keys {
			after = k
			l, err := d.read(ctx, k)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if l.Rerun != nil {
				continue // drawn beside the tree, not in it
			}
			if !tree.resumedBy(l, &size) || !suspended(tree.Events) {
				break
			}
		}
	}
	return tree, nil
}

// resumedBy adds the events of l, a run that resumed tree, to tree, whose
// events weigh *size bytes so far, and reports whether it did: past
// maxTreeBytes it marks tree truncated instead.
func (tree *runLog) resumedBy(l *runLog, size *int) bool {
	*size += eventsBytes(l.Events)
	if *size > maxTreeBytes {
		tree.Truncated = true
		return false
	}
	tree.Events = append(slices.Clip(tree.Events), l.Events...)
	tree.Truncated = tree.Truncated || l.Truncated
	return true
}

// eventsBytes is what events weigh, in bytes.
func eventsBytes(events []json.RawMessage) int {
	n := 0
	for _, e := range events {
		n += len(e)
	}
	return n
}

// recordedEvent is what turnLog reads of a recorded event.
type recordedEvent struct {
	Type          event.Type `json:"type"`
	SubagentRunID string     `json:"subagentRunId"`
	ToolCallID    string     `json:"toolCallId"`
}

// maxScannedRuns bounds the recorded runs of a thread turnLog reads, the
// newest first, to find the one that holds a call: a request names the
// run past them.
const maxScannedRuns = 1000

// turnLog returns, as runLog does, the recorded run of the thread (with
// the runs that resumed it) that holds an event match accepts, what names
// that event in an error: the newest recorded run that holds one gives
// the turn, and the turn's runs are read, in order, each with the runs
// that resumed it. It returns nil when no run holds one, or only runs that
// failed (which left the thread's conversation as it was), and an error
// when several runs that did not fail do.
func (d *Handler) turnLog(ctx context.Context, owner, thread string, match func(recordedEvent) bool, what string) (*runLog, error) {
	holds := func(l *runLog) bool {
		for _, raw := range l.Events {
			var e recordedEvent
			if json.Unmarshal(raw, &e) == nil && match(e) {
				return true
			}
		}
		return false
	}
	rs := recordsOf(owner, thread)
	last, _, err := d.last(ctx, rs)
	if err != nil {
		return nil, err
	}
	// The thread's runs, newest first, up to the newest that holds a
	// match, then back to the first of its turn.
	type seen struct {
		n    int64
		turn int
	}
	var newer []seen
	var runs []*runLog // the turn's, newest first
	turn := -1
	for n := last; n >= 1; n-- {
		if last-n >= maxScannedRuns {
			return nil, fmt.Errorf("%s is not among the thread's last %d recorded runs: name the run to re-run from (fromRunId)", what, maxScannedRuns)
		}
		l, err := d.read(ctx, rs.run(n))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if l.Rerun != nil {
			continue // not a run of the thread
		}
		if turn < 0 {
			if !holds(l) {
				newer = append(newer, seen{n, l.Turn})
				continue
			}
			turn = l.Turn
			// The runs of its turn recorded after it: those that
			// resumed it, say.
			for i := len(newer) - 1; i >= 0; i-- {
				if newer[i].turn != turn {
					continue
				}
				nl, err := d.read(ctx, rs.run(newer[i].n))
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return nil, err
				}
				if err == nil {
					runs = append(runs, nl)
				}
			}
			slices.Reverse(runs)
		}
		if l.Turn < turn {
			break
		}
		if l.Turn == turn {
			runs = append(runs, l)
		}
	}
	slices.Reverse(runs)
	// Each run with the runs that resumed it, as runLog puts them.
	var found []*runLog
	var tree *runLog
	size := 0
	end := func() {
		if tree != nil && holds(tree) && !failed(tree.Events) {
			found = append(found, tree)
		}
	}
	for _, l := range runs {
		if tree == nil || !suspended(tree.Events) || tree.Truncated {
			end()
			tree, size = l, eventsBytes(l.Events)
			continue
		}
		tree.resumedBy(l, &size)
	}
	end()
	switch {
	case len(found) > 1:
		return nil, fmt.Errorf("%s is in %d recorded runs of the thread: name the one to re-run from (fromRunId)", what, len(found))
	case len(found) == 1:
		return found[0], nil
	}
	return nil, nil
}

// failed reports whether the events end with the run failing.
func failed(events []json.RawMessage) bool {
	for i := len(events) - 1; i >= 0; i-- {
		var e recordedEvent
		if json.Unmarshal(events[i], &e) == nil && e.SubagentRunID == "" && (e.Type == event.RunFinished || e.Type == event.RunError) {
			return e.Type == event.RunError
		}
	}
	return false
}

// read reads the run recorded under key.
func (d *Handler) read(ctx context.Context, key string) (*runLog, error) {
	v, _, err := d.store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	var l runLog
	if err := json.Unmarshal(v, &l); err != nil {
		return nil, fmt.Errorf("a recorded run of the thread cannot be read: %v", err)
	}
	return &l, nil
}

// serveDelete deletes a thread through the AG-UI handler and, once it is
// gone, the runs the viewer recorded of it (in the same store, the AG-UI
// handler has deleted them with the thread).
func (d *Handler) serveDelete(w http.ResponseWriter, r *http.Request) {
	if d.store == nil {
		http.StripPrefix("/threads", d.threads).ServeHTTP(w, r)
		return
	}
	thread := r.PathValue("thread")
	owner := ""
	if d.authorize != nil {
		var err error
		if owner, err = d.authorize(r, thread); err != nil {
			refuse(w, err)
			return
		}
	}
	c := &captured{header: http.Header{}}
	http.StripPrefix("/threads", d.threads).ServeHTTP(c, r)
	if c.status == http.StatusNoContent {
		if err := d.store.DeleteScope(r.Context(), recordsOf(owner, thread).scope); err != nil {
			httpError(w, http.StatusInternalServerError, "the thread is deleted, the runs recorded of it are not (delete it again): "+err.Error())
			return
		}
	}
	for k, v := range c.header {
		w.Header()[k] = v
	}
	w.WriteHeader(c.status)
	w.Write(c.body.Bytes())
}

// captured is the short answer of the AG-UI handler to a deletion, kept to
// be sent once the recorded runs are deleted too.
type captured struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *captured) Header() http.Header { return c.header }

func (c *captured) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

func (c *captured) Write(p []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	if c.body.Len()+len(p) > 64<<10 {
		return 0, errors.New("devui: the answer to a deletion is longer than 64 KiB")
	}
	return c.body.Write(p)
}
