package temporal

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

func TestDialServerDownNamesTheAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, "", nil)
	if err == nil {
		c.Close()
		t.Fatal("dial of a closed port succeeded")
	}
	if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "cannot reach") {
		t.Fatalf("error %q does not name %s", err, addr)
	}
}
