// Package id makes the identifiers of runs, messages and sub-agent
// invocations.
package id

import (
	"encoding/binary"
	"math/rand/v2"
)

// digits are the 32 digits of an id, lower case, so that an id reads the
// same in JSON, logs and URLs.
const digits = "0123456789abcdefghijklmnopqrstuv"

// size is the number of digits of an id: 64 bits at 5 bits a digit.
const size = 13

// New returns prefix followed by 64 random bits as 13 base-32 digits: unique
// for all practical purposes, cheap, and safe for concurrent use.
func New(prefix string) string {
	return format(prefix, rand.Uint64())
}

// FromHash returns prefix followed by the first 64 bits of sum, a hash of
// at least 8 bytes, in the digits of New: an id that is the same each time
// it is derived from the same data, and looks like a random one.
func FromHash(prefix string, sum []byte) string {
	return format(prefix, binary.BigEndian.Uint64(sum[:8]))
}

func format(prefix string, v uint64) string {
	var b [size]byte
	for i := size - 1; i >= 0; i-- {
		b[i] = digits[v&31]
		v >>= 5
	}
	return prefix + string(b[:])
}
