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
	if err := run(context.Background(), strings.NewReader("y\n"), os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// deletes files for good: Allow delete_logs with {"dir":"/var/log/old"}? [y/N]
	// (deleting /var/log/old)
	// answer: Janitor says: Result: deleted the logs in /var/log/old
}

// A person who says no: nothing is deleted and the janitor's model reads why.
func Example_refused() {
	if err := run(context.Background(), strings.NewReader("n\n"), os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// deletes files for good: Allow delete_logs with {"dir":"/var/log/old"}? [y/N]
	// answer: Janitor says: Result: tool: the person asked did not approve the call delete_logs: the operator said no
}
