// Command durable shows a delegation tree surviving a crash. A lead agent
// fans out to 20 workers, one per chapter of a report, with a journal on
// the embedded store (one SQLite file, nothing to install). The first run
// is a child process that kills itself (SIGKILL) part way; the second run
// opens the same journal, runs the same turn again, and prints which
// workers were answered from the journal and which ran.
//
// It runs on a scripted model, so it needs no key and no network.
//
//	go run ./examples/durable            # a fresh file in the temp directory
//	go run ./examples/durable -db my.db  # keep the file
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
)

const (
	chapters = 20
	// turn names the lead's turn: the run after a crash opens the journal
	// by the same name to find what had finished.
	turn = "report-summary-1"
	// crashEnv tells the first run, a child process, when to kill itself.
	crashEnv = "DEPUTY_DURABLE_CRASH_AFTER"
)

var (
	dbFlag         = flag.String("db", "", "the store's file (default: a fresh one in the temp directory, removed at the end)")
	crashAfterFlag = flag.Int("crash-after", 8, "the first run kills itself when this many workers have answered")
)

func main() {
	flag.Parse()
	db, crashAfter := *dbFlag, *crashAfterFlag
	if n := os.Getenv(crashEnv); n != "" {
		k, _ := strconv.Atoi(n)
		crash(db, k)
		return
	}
	if db == "" {
		dir, err := os.MkdirTemp("", "deputy-durable-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		db = filepath.Join(dir, "deputy.db")
	}

	fmt.Printf("run 1: 20 workers, the process kills itself after %d have answered\n", crashAfter)
	if err := firstRun(db, crashAfter); err != nil {
		log.Fatal(err)
	}

	st := open(db)
	defer st.Close()
	ctx := context.Background()
	j, err := st.Journal(ctx, turn)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("run 2: the journal holds %d finished workers; the same turn runs again\n", j.Len())
	lead, ran := team()
	out, err := lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "Summarize the report, one worker per chapter."})
	if err != nil {
		log.Fatal(err)
	}
	var replayed []int
	for i := 1; i <= chapters; i++ {
		if !slices.Contains(ran.list(), i) {
			replayed = append(replayed, i)
		}
	}
	fmt.Println("replayed from the journal (no model call):", replayed)
	fmt.Println("ran again:", ran.list())
	fmt.Printf("workers' usage in run 2: %d model calls\n", out.ChildUsage.Requests)
	fmt.Println("answer:", out.Answer)
}

// firstRun runs the turn in a child process that kills itself part way.
func firstRun(db string, crashAfter int) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "-db", db)
	cmd.Env = append(os.Environ(), crashEnv+"="+strconv.Itoa(crashAfter))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err = cmd.Run()
	if cmd.ProcessState == nil || cmd.ProcessState.Success() {
		return fmt.Errorf("the first run was meant to be killed; it ended with %v", err)
	}
	fmt.Println("run 1 was killed:", cmd.ProcessState)
	return nil
}

// crash is the first run: it kills itself once k workers have answered.
func crash(db string, k int) {
	st := open(db)
	ctx := context.Background()
	j, err := st.Journal(ctx, turn)
	if err != nil {
		log.Fatal(err)
	}
	lead, ran := team()
	ran.onAnswer = func(n int) {
		if n == k {
			// Give the journal a moment to store the answers, as it does
			// while a real fan-out goes on, then die without cleaning up.
			time.Sleep(20 * time.Millisecond)
			p, _ := os.FindProcess(os.Getpid())
			p.Kill()
			select {}
		}
	}
	lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "Summarize the report, one worker per chapter."})
	log.Fatal("the first run finished; it was meant to be killed")
}

func open(path string) *store.Store {
	b, err := sqlite.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	st, err := store.New(b)
	if err != nil {
		log.Fatal(err)
	}
	return st
}

// team returns the lead, whose scripted model asks for all the workers at
// once, and the record of which chapters' workers called their model.
func team() (*agent.React, *workers) {
	ran := &workers{}
	worker, err := subagent.FromFactory("summarize_chapter", "Summarizes one chapter of the report.",
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(ran.model(), agent.WithName("worker"))
		})
	if err != nil {
		log.Fatal(err)
	}
	calls := make([]provider.ToolCall, chapters)
	for i := range calls {
		args, _ := json.Marshal(map[string]string{"task": "chapter " + strconv.Itoa(i+1)})
		calls[i] = provider.ToolCall{ID: "call_" + strconv.Itoa(i+1), Name: "summarize_chapter", Arguments: args}
	}
	leadModel := fake.NewProvider(
		fake.Calls(calls...),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			n := 0
			for _, m := range req.Messages {
				if m.Role == provider.RoleTool && !m.IsError {
					n++
				}
			}
			return provider.Response{Message: provider.AssistantMessage(fmt.Sprintf("The report in %d chapter summaries: revenue grew, costs fell.", n))}, nil
		}),
	)
	lead, err := agent.NewReact(leadModel, agent.WithName("lead"), agent.WithTools(worker))
	if err != nil {
		log.Fatal(err)
	}
	return lead, ran
}

// workers is the workers' scripted model: it answers after 100 to 500 ms
// and notes which chapter it was asked about.
type workers struct {
	mu       sync.Mutex
	ran      []int
	answered atomic.Int64
	onAnswer func(n int)
}

func (w *workers) model() provider.Provider {
	return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		task := req.Messages[len(req.Messages)-1].Content
		var args struct{ Task string }
		json.Unmarshal([]byte(task), &args)
		ch, _ := strconv.Atoi(strings.TrimPrefix(args.Task, "chapter "))
		w.mu.Lock()
		w.ran = append(w.ran, ch)
		w.mu.Unlock()
		select {
		case <-time.After(time.Duration(100+(ch*137)%400) * time.Millisecond):
		case <-ctx.Done():
			return provider.Response{}, ctx.Err()
		}
		if w.onAnswer != nil {
			defer w.onAnswer(int(w.answered.Add(1)))
		}
		return provider.Response{
			Message: provider.AssistantMessage(fmt.Sprintf("Chapter %d: the figures are in line with the plan.", ch)),
			Usage:   provider.Usage{InputTokens: 400, OutputTokens: 30, Requests: 1},
		}, nil
	})
}

func (w *workers) list() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.Clone(w.ran)
	slices.Sort(out)
	return out
}
