//go:build unix

package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// workerProcs starts a test's worker processes: the test binary run again
// with only the test, which reads what it is to do from the variable env
// and runs a worker instead. When the test ends, it stops those still
// running and, if the test failed, shows the tail of each one's output.
type workerProcs struct {
	t    *testing.T
	test string // the test's name
	env  string
	dir  string
	all  []*workerProc
}

// workerProc is one worker process.
type workerProc struct {
	cmd    *exec.Cmd
	out    string        // the file of its output
	exited chan struct{} // closed once the process has ended, err its end
	err    error
}

func newWorkerProcs(t *testing.T, test, env string) *workerProcs {
	ws := &workerProcs{t: t, test: test, env: env, dir: t.TempDir()}
	t.Cleanup(ws.stop)
	return ws
}

// start starts a worker process told spec (in JSON).
func (ws *workerProcs) start(spec any) *workerProc {
	t := ws.t
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	p := &workerProc{out: filepath.Join(ws.dir, fmt.Sprintf("worker%d.out", len(ws.all))), exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^"+ws.test+"$", "-test.timeout=10m")
	p.cmd.Env = append(os.Environ(), ws.env+"="+string(b))
	f, err := os.Create(p.out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	ws.all = append(ws.all, p)
	return p
}

// killed says whether the process, which has ended, was killed by SIGKILL.
func (p *workerProc) killed() bool {
	var exit *exec.ExitError
	if !errors.As(p.err, &exit) {
		return false
	}
	st := exit.Sys().(syscall.WaitStatus)
	return st.Signaled() && st.Signal() == syscall.SIGKILL
}

func (ws *workerProcs) stop() {
	for _, p := range ws.all {
		select {
		case <-p.exited:
			continue
		default:
		}
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	if ws.t.Failed() {
		for i, p := range ws.all {
			b, _ := os.ReadFile(p.out)
			if len(b) > 4<<10 {
				b = b[len(b)-4<<10:]
			}
			ws.t.Logf("worker %d's output (tail):\n%s", i+1, b)
		}
	}
}

// killGate keeps a worker process's kill out of the one window nothing
// can close on Temporal (an activity runs at least once): between a
// model's answer or a tool's effect and the server's having recorded its
// activity's result. Each answer and effect passes the gate, which gives
// it a mark its activity's result holds; the worker's client (dialed by
// dial) clears each mark the server takes. To kill the process, kill
// closes the gate (an answer or effect to come waits for the kill), waits
// until the server has every mark let through, lets the process run on
// for jitter, and kills it with SIGKILL wherever that leaves it.
type killGate struct {
	log    func(format string, args ...any) // the line "kill <at>" before the kill, or "stuck: ..."
	jitter time.Duration

	mu      sync.Mutex
	closed  bool            // no new answer or effect: the process is about to be killed
	opened  chan struct{}   // never closed: what a call stopped at the gate waits on
	pending map[string]bool // marks of answers and effects the server has not acknowledged
	marks   int
}

func newKillGate(jitter time.Duration, log func(format string, args ...any)) *killGate {
	return &killGate{log: log, jitter: jitter, opened: make(chan struct{}), pending: map[string]bool{}}
}

var gateMark = regexp.MustCompile(`~[ae]\d+~`)

// pass lets an answer or an effect (kind a or e) through the gate and
// returns its mark, which the result of its activity is to hold; once the
// process is to be killed, it waits for the kill.
func (g *killGate) pass(kind string) string {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		<-g.opened
	}
	g.marks++
	mark := fmt.Sprintf("~%s%d~", kind, g.marks)
	g.pending[mark] = true
	g.mu.Unlock()
	return mark
}

// acknowledged clears the marks of a request the server took.
func (g *killGate) acknowledged(req []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range gateMark.FindAll(req, -1) {
		delete(g.pending, string(m))
	}
}

// intercept is a gRPC interceptor of the worker's client: each request
// the server took (an activity's result, a workflow task's commands)
// clears the marks it holds.
func (g *killGate) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if m, ok := req.(proto.Message); ok && err == nil && strings.Contains(method, "Respond") {
		if b, merr := proto.Marshal(m); merr == nil {
			g.acknowledged(b)
		}
	}
	return err
}

// dial dials the worker's client, which clears the marks the server takes.
func (g *killGate) dial(t *testing.T) client.Client {
	hostPort, ns := serverAddr(t)
	c, err := client.DialContext(context.Background(), client.Options{HostPort: hostPort, Namespace: ns,
		Logger:            log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(g.intercept)}}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kill closes the gate now and kills the process once the server has
// every answer and effect let through; at is what the log says it was
// killed at.
func (g *killGate) kill(at any) {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	go g.crash(at)
}

func (g *killGate) crash(at any) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		g.mu.Lock()
		var left []string
		for m := range g.pending {
			left = append(left, m)
		}
		g.mu.Unlock()
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			g.log("stuck: %v were let through 30 s ago and the server has not taken them", left)
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(g.jitter)
	g.log("kill %v", at)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
