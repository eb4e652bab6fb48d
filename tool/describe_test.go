package tool_test

import (
	"context"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/tool"
)

type watchArgs struct {
	City  string `json:"city"`
	Every struct {
		Minutes int
		Notify  chan string
	} `json:"every"`
}

// New refuses arguments it cannot describe to a model with an error that
// names the field, instead of panicking.
func TestNewRefusesArgumentsJSONCannotHold(t *testing.T) {
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("New panicked: %v", p)
			}
		}()
		_, err = tool.New("watch", "Watches the weather.", func(ctx context.Context, in watchArgs) (string, error) { return "", nil })
	}()
	if err == nil || !strings.Contains(err.Error(), `tool "watch"`) || !strings.Contains(err.Error(), "field Every.Notify of tool_test.watchArgs: its type chan string is a channel") {
		t.Fatalf("New: %v; want an error naming the tool and the field", err)
	}
}
