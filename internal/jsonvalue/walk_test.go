package jsonvalue

import (
	"errors"
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
