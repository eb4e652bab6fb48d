// Package id makes the identifiers of runs, messages and sub-agent
// invocations.
package id

import "math/rand/v2"

// digits are the 32 digits of an id, lower case, so that an id reads the
// same in JSON, logs and URLs.
const digits = "0123456789abcdefghijklmnopqrstuv"

// size is the number of digits of an id: 64 bits at 5 bits a digit.
const size = 13

// New returns prefix followed by 64 random bits as 13 base-32 digits: unique
// for all practical purposes, cheap, and safe for concurrent use.
func New(prefix string) string {
	var b [size]byte
	v := rand.Uint64()
	for i := size - 1; i >= 0; i-- {
		b[i] = digits[v&31]
		v >>= 5
	}
	return prefix + string(b[:])
}
