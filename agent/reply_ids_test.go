package agent

import (
	"fmt"
	"testing"

	"github.com/deputy-go/deputy/provider"
)

// withIDs gives every call of a reply an id of its own, keeping the first
// of each id the model sent, for a few calls and for many (which it keeps
// in a set), and leaves the provider's slice as it was.
func TestWithIDsGivesEveryCallItsOwnID(t *testing.T) {
	for _, n := range []int{3, 40} {
		in := make([]provider.ToolCall, n)
		for i := range in {
			switch i % 3 {
			case 0:
				in[i].ID = fmt.Sprintf("c%d", i)
			case 1:
				in[i].ID = "" // none
			case 2:
				in[i].ID = "c0" // the first call's again
			}
		}
		before := fmt.Sprint(in)
		got := withIDs(in, nil, nil)
		if fmt.Sprint(in) != before {
			t.Errorf("%d calls: the provider's slice changed", n)
		}
		seen := map[string]bool{}
		for i, c := range got {
			if c.ID == "" || seen[c.ID] {
				t.Errorf("%d calls: call %d has id %q, empty or taken", n, i, c.ID)
			}
			seen[c.ID] = true
			if i%3 == 0 && c.ID != in[i].ID {
				t.Errorf("%d calls: call %d's own id %q became %q", n, i, in[i].ID, c.ID)
			}
		}
	}
}
