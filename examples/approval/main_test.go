package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A person who says yes: the deletion runs once, after the question.
func Example() {
	if err := run(context.Background(), strings.NewReader("y\n"), os.Stdout, "fresh"); err != nil {
		panic(err)
	}
	// Output:
	// deletes files for good: Allow delete_logs with {"dir":"/var/log/old"}? [y/N]
	// (deleting /var/log/old)
	// answer: Janitor says: Result: deleted the logs in /var/log/old
	// model calls: ops 2, janitor 2 (the answers before the question were replayed, not asked again)
}

// A person who says no: nothing is deleted and the janitor's model reads why.
func Example_refused() {
	if err := run(context.Background(), strings.NewReader("n\n"), os.Stdout, "fresh"); err != nil {
		panic(err)
	}
	// Output:
	// deletes files for good: Allow delete_logs with {"dir":"/var/log/old"}? [y/N]
	// answer: Janitor says: Result: tool: the person asked did not approve the call delete_logs: the operator said no
	// model calls: ops 2, janitor 2 (the answers before the question were replayed, not asked again)
}

// Whatever ids the models give their calls — none, or call_0 in every
// reply — the approved deletion runs once and no answer is asked twice.
func TestApprovalWhateverTheIDs(t *testing.T) {
	for _, ids := range []string{"none", "restart"} {
		var out strings.Builder
		if err := run(context.Background(), strings.NewReader("y\n"), &out, ids); err != nil {
			t.Fatalf("%s ids: %v", ids, err)
		}
		want := `deletes files for good: Allow delete_logs with {"dir":"/var/log/old"}? [y/N]
(deleting /var/log/old)
answer: Janitor says: Result: deleted the logs in /var/log/old
model calls: ops 2, janitor 2 (the answers before the question were replayed, not asked again)
`
		if out.String() != want {
			t.Errorf("%s ids: the program printed\n%s\nwant\n%s", ids, out.String(), want)
		}
	}
}
