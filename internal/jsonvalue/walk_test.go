package jsonvalue

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// everyKey visits every object and array, giving no key a slot.
type everyKey struct{}

func (everyKey) Member(string) (Visitor, int, error) { return everyKey{}, -1, nil }
func (everyKey) Element() Visitor                    { return everyKey{} }

// oneSlot gives every key slot 0, and refuses the key "no".
type oneSlot struct{}

func (oneSlot) Member(k string) (Visitor, int, error) {
	if k == "no" {
		return nil, -1, errors.New("refused")
	}
	return oneSlot{}, 0, nil
}
func (oneSlot) Element() Visitor { return oneSlot{} }

// FuzzWalk holds Walk to Valid: a walk that refuses nothing passes
// exactly the JSON text, and one that refuses names where.
func FuzzWalk(f *testing.F) {
	for _, s := range memberCases {
		f.Add(s)
	}
	f.Add(`{"a":[{"b":1},{"no":2}]}`)
	f.Add(`[{"x":1,"y":2}]`)
	f.Fuzz(func(t *testing.T, s string) {
		err := Walk(s, everyKey{})
		if (err == nil) != Valid(s) {
			t.Fatalf("Walk(%q) = %v, Valid = %v", s, err, Valid(s))
		}
		err = Walk(s, oneSlot{})
		var we *WalkError
		var rk *RepeatedKeyError
		if (errors.As(err, &we) || errors.As(err, &rk)) && !Valid(s) {
			t.Fatalf("Walk(%q) = %v for text that is not JSON", s, err)
		}
	})
}

func TestWalkSaysWhere(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":[{"b":1},{"no":2}]}`: "at /a/1: refused",
		`{"no":1}`:                 "at the top level: refused",
		`[{"x":1},{"y":2,"z":3}]`:  `at /1: the key "z" appears more than once: write each key once`,
		`{"a":{"no":1},}`:          "not valid JSON",
	} {
		if err := Walk(in, oneSlot{}); err == nil || err.Error() != want {
			t.Errorf("Walk(%s) = %v, want %s", in, err, want)
		}
	}
}

// slotByKey gives the key "k<n>" slot n.
type slotByKey struct{}

func (slotByKey) Member(k string) (Visitor, int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(k, "k"))
	if err != nil {
		return slotByKey{}, -1, nil
	}
	return slotByKey{}, n, nil
}
func (slotByKey) Element() Visitor { return slotByKey{} }

// TestWalkSlotsPast64: a key repeated is refused whatever its slot, past
// the 64 a word holds and the 256 kept in place, and keys of different
// slots that share a word's bit modulo 64 are not.
func TestWalkSlotsPast64(t *testing.T) {
	for _, c := range []struct {
		in, want string // want: the error, "" for none
	}{
		{`{"k0":1,"k64":2,"k128":3,"k256":4,"k320":5,"k1000":6,"k63":7,"k255":8}`, ""},
		{`{"k64":1,"k0":2,"k64":3}`, `at the top level: the key "k64" appears more than once: write each key once`},
		{`{"k200":1,"k200":2}`, `at the top level: the key "k200" appears more than once: write each key once`},
		{`{"k256":1,"k1000":2,"k256":3}`, `at the top level: the key "k256" appears more than once: write each key once`},
		{`{"a":{"k1000":1},"b":{"k1000":1,"c":{"k999":1,"k1000":2,"k999":3}}}`, `at /b/c: the key "k999" appears more than once: write each key once`},
	} {
		err := Walk(c.in, slotByKey{})
		if got := fmt.Sprint(err); c.want == "" && err != nil || c.want != "" && got != c.want {
			t.Errorf("Walk(%s) = %v, want %q", c.in, err, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		if Walk(`{"k0":1,"k100":2,"k255":{"k63":1,"k64":2}}`, slotByKey{}) != nil {
			t.Fatal("refused")
		}
	}); n != 0 {
		t.Fatalf("%v allocations a walk of slots below 256, want 0", n)
	}
}
