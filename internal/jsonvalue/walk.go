package jsonvalue

import "strconv"

// A Visitor is shown the objects and arrays of a JSON text by Walk.
type Visitor interface {
	// Member is told of a key of an object this visitor was given. It
	// returns the visitor of the member's value (nil: none), and the
	// key's slot: two members of one object with the same slot, 0 or
	// more, are refused as a repeated key (-1: no slot). An error stops
	// the walk.
	Member(key string) (v Visitor, slot int, err error)
	// Element returns the visitor of the elements of an array this
	// visitor was given (nil: none).
	Element() Visitor
}

// WalkError is the error a Visitor stopped Walk with, and where.
type WalkError struct {
	// Pointer is the JSON pointer of the object whose key was refused
	// ("" for the top level).
	Pointer string
	Err     error
}

// Error says where, then what the visitor said.
func (e *WalkError) Error() string {
	where := "at the top level"
	if e.Pointer != "" {
		where = "at " + e.Pointer
	}
	return where + ": " + e.Err.Error()
}

// Unwrap returns the visitor's error.
func (e *WalkError) Unwrap() error { return e.Err }

// Walk reads the JSON text s once, from start to end, showing v its
// value: each object's keys, in order, to the visitor of that object,
// and each array to the visitor of that array. Its work is linear in the
// length of s, and it allocates nothing but the keys that hold escapes,
// the slots from 256 on an object uses (a bit each) and the error. It
// fails with ErrSyntax when s is not valid JSON, a *RepeatedKeyError
// when two keys of an object take one slot, and a *WalkError when a
// visitor refuses a key.
func Walk(s string, v Visitor) error {
	p := parser{s: s}
	if !p.walk(v) {
		return p.walkErr()
	}
	if p.space(); p.i != len(s) {
		return ErrSyntax
	}
	return nil
}

// walkErr is the error of a walk that stopped: the visitor's, or a
// repeated key, where it was; else the text is not JSON.
func (p *parser) walkErr() error {
	if p.refused == nil && p.repeated == nil {
		return ErrSyntax
	}
	// The text after the stop is checked too: a refusal in text that is
	// not JSON is a syntax error, as DecodeOnce reports it.
	if !Valid(p.s) {
		return ErrSyntax
	}
	if p.repeated != nil {
		p.repeated.Pointer = pointer(p.where)
		return p.repeated
	}
	p.refused.Pointer = pointer(p.where)
	return p.refused
}

// walk reads one value, shown to v (nil: read only).
func (p *parser) walk(v Visitor) bool {
	if v == nil {
		p.decode = false
		_, ok := p.value()
		return ok
	}
	p.space()
	if p.i >= len(p.s) {
		return false
	}
	switch p.s[p.i] {
	case '{':
		return p.walkObject(v)
	case '[':
		return p.walkArray(v)
	}
	p.decode = false
	_, ok := p.value()
	return ok
}

func (p *parser) walkObject(v Visitor) bool {
	empty, ok := p.open('}')
	if empty || !ok {
		return ok
	}
	var seen slots
	for {
		p.decode = true
		key, ok := p.key()
		if !ok {
			return false
		}
		mv, slot, err := v.Member(key)
		switch {
		case err != nil:
			p.refused = &WalkError{Err: err}
			return false
		case slot >= 0 && !seen.take(slot):
			p.repeated = &RepeatedKeyError{Key: key}
			return false
		}
		if !p.walk(mv) {
			p.within(key)
			return false
		}
		if more, ok := p.next('}'); !more {
			return ok
		}
	}
}

func (p *parser) walkArray(v Visitor) bool {
	empty, ok := p.open(']')
	if empty || !ok {
		return ok
	}
	ev := v.Element()
	for n := 0; ; n++ {
		if !p.walk(ev) {
			if p.stopped() {
				p.within(strconv.Itoa(n))
			}
			return false
		}
		if more, ok := p.next(']'); !more {
			return ok
		}
	}
}

// slots are the slots an object's keys took, a bit each: the first 256
// in place, the others in more, made when one is taken.
type slots struct {
	few  [4]uint64
	more []uint64
}

// take marks slot (0 or more) taken, and reports whether it was free.
func (s *slots) take(slot int) bool {
	w, bit := slot>>6, uint64(1)<<(slot&63)
	words := s.few[:]
	if w >= len(s.few) {
		w -= len(s.few)
		if w >= len(s.more) {
			s.more = append(s.more, make([]uint64, w+1-len(s.more))...)
		}
		words = s.more
	}
	if words[w]&bit != 0 {
		return false
	}
	words[w] |= bit
	return true
}
