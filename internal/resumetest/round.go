package resumetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/deputy-go/deputy/tool"
)

// StartRound runs the test named test of the running test binary in a
// process of its own, round as JSON in the environment variable env and
// extra added to its environment, and returns the report (R, as JSON)
// it wrote to out, or killed when SIGKILL ended it. pid, if not nil,
// holds the process's id while it runs. A process that fails otherwise,
// or writes no report, fails t with its output.
func StartRound[R any](t testing.TB, test string, round any, out, env string, pid *atomic.Int64, extra ...string) (report R, killed bool) {
	t.Helper()
	spec, err := json.Marshal(round)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(out)
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), env+"="+string(spec)), extra...)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	err = cmd.Start()
	if err == nil {
		if pid != nil {
			pid.Store(int64(cmd.Process.Pid))
		}
		err = cmd.Wait()
		if pid != nil {
			pid.Store(0)
		}
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return report, true
		}
	}
	if err != nil {
		t.Fatalf("the round's process: %v\n%s", err, output.Bytes())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the round wrote no report: %v\n%s", err, output.Bytes())
	}
	if err := json.Unmarshal(data, &report); err != nil {
		t.Fatal(err)
	}
	return report, false
}

// CallKey names a call of the tool name with the arguments args, secret
// replaced by redacted and the JSON made canonical, as the logs of the
// kill tests do.
func CallKey(name string, args json.RawMessage, secret, redacted string) string {
	var v any
	if err := json.Unmarshal(args, &v); err == nil {
		args, _ = json.Marshal(v)
	}
	return name + " " + strings.ReplaceAll(string(args), secret, redacted)
}

// Effect is a tool of a kill test's tree whose run is a side effect: Ran
// logs it under its CallKey and, until the agent that called it reads
// its result (which is recorded in the journal by then), holds it
// pending, both at once. Its result names the agent that called it, by
// the "who" of its arguments. Arguments that hold Secret are reported to
// Leaked first.
type Effect struct {
	Name, Secret, Redacted string
	Leaked                 func(where string)
	Ran                    func(key, result string)
}

// Definition is the tool's: an object with a "who".
func (e Effect) Definition() tool.Definition {
	return tool.Definition{Name: e.Name, Description: "Does " + e.Name + ".", Parameters: json.RawMessage(`{"type":"object","properties":{"who":{"type":"string"}}}`)}
}

// Call runs the effect.
func (e Effect) Call(_ context.Context, call tool.Call) (tool.Result, error) {
	if strings.Contains(string(call.Arguments), e.Secret) {
		e.Leaked("the tool " + e.Name)
	}
	var a struct {
		Who string `json:"who"`
	}
	_ = json.Unmarshal(call.Arguments, &a)
	res := e.Name + " done for " + a.Who
	e.Ran(CallKey(e.Name, call.Arguments, e.Secret, e.Redacted), res)
	return tool.Result{Content: res}, nil
}

// Round log lines that begin and end a round's process in the log of a
// kill test: a line is its kind, a tab and its key.
const (
	LogStart = "start" // a round's process began
	LogEnd   = "end"   // its turn returned
)

// RoundLog is what one round's process logged: its lines, kind and key,
// and whether its turn returned (it was not killed).
type RoundLog struct {
	Lines [][2]string
	Ended bool
}

// ReadRoundLog reads the log at path of rounds rounds, kills of them
// killed, by process; it fails t when the log does not hold as many.
func ReadRoundLog(t testing.TB, path string, rounds, kills int) []RoundLog {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var procs []RoundLog
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		kind, key, _ := strings.Cut(line, "\t")
		switch {
		case kind == LogStart:
			procs = append(procs, RoundLog{})
		case len(procs) == 0:
			t.Fatalf("the log does not begin with a round's start: %q", line)
		case kind == LogEnd:
			procs[len(procs)-1].Ended = true
		default:
			procs[len(procs)-1].Lines = append(procs[len(procs)-1].Lines, [2]string{kind, key})
		}
	}
	ended := 0
	for _, p := range procs {
		if p.Ended {
			ended++
		}
	}
	if len(procs) != rounds || ended != rounds-kills {
		t.Fatalf("the log has %d rounds, %d of them ended; %d ran, %d were killed", len(procs), ended, rounds, kills)
	}
	return procs
}
