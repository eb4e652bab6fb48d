package policy

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
)

// A redactor reads no text shorter than its shortest secret, and misses
// no secret for it: each pattern's shortest match, alone, is redacted, in
// a result and in JSON arguments, including matches whose characters are
// fewer bytes than the pattern's (an invalid byte matches U+FFFD, three
// bytes) or more (a Kelvin sign matches k regardless of case).
func TestRedactorSkipsOnlyTextsTooShortForASecret(t *testing.T) {
	for _, c := range []struct {
		pattern, shortest string
		bound             int
	}{
		{`AKIA[0-9A-Z]{16}`, "AKIA0123456789ABCDEF", 20},
		{`tok_[a-z]{6}`, "tok_abcdef", 10},
		{`ab|c`, "c", 1},
		{`(x)+y{2,}`, "xyy", 3},
		{`(?i)k{3}`, "KKK", 3},
		{`(?i)kk`, "\u212Ak", 2},
		{`\x{FFFD}{3}`, "\xff\xfe\xfd", 3},
		{`\bpw=\d+?\b`, "pw=1", 4},
		{`(?:sk|pk)-[a-z]{2}\b`, "pk-ab", 5},
		{`a?b*`, "", 0},
	} {
		re := regexp.MustCompile(c.pattern)
		if !re.MatchString(c.shortest) {
			t.Fatalf("%s does not match %q: a bad case", c.pattern, c.shortest)
		}
		r := Redact("secrets", nil, re).(*redactor)
		if r.shortest != c.bound {
			t.Errorf("%s: texts shorter than %d are skipped, want %d", c.pattern, r.shortest, c.bound)
		}
		if c.shortest == "" {
			continue
		}
		chk := &Check{Point: AfterResult, Result: c.shortest}
		if r.Decide(context.Background(), chk); chk.Result != Redacted {
			t.Errorf("%s: the result %q became %q", c.pattern, c.shortest, chk.Result)
		}
		args, _ := json.Marshal(c.shortest)
		if len(args) == len(c.shortest)+2 { // nothing escaped: the pattern matches the JSON
			chk = &Check{Point: BeforeTool, Arguments: args}
			if r.Decide(context.Background(), chk); string(chk.Arguments) != `"`+Redacted+`"` {
				t.Errorf("%s: the arguments %s became %s", c.pattern, args, chk.Arguments)
			}
		}
	}
	// Values: the shortest value is the bound; shorter texts pass.
	r := Redact("secrets", []string{"hunter2", "s3cr3t-value"}).(*redactor)
	if r.shortest != len("hunter2") {
		t.Errorf("values: texts shorter than %d are skipped, want %d", r.shortest, len("hunter2"))
	}
	if s, ch := r.text("hunter2"); !ch || s != Redacted {
		t.Errorf("the shortest value alone: %q", s)
	}
	if s, ch := r.text("hunter"); ch || s != "hunter" {
		t.Errorf("a text too short for any value: %q", s)
	}
}
