package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// The program the README opens with runs and prints the lead's answer and
// what each agent used.
func TestFirstProgram(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = stdout }()
	main()
	w.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"The tallest mountain is Everest (8,849 m).\n",
		"lead: 2 req, ",
		"- researcher: 1 req, ",
	}
	for _, s := range want {
		if !strings.Contains(string(out), s) {
			t.Errorf("the program printed\n%s\nwant it to contain %q", out, s)
		}
	}
}
