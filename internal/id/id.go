// Package id makes the identifiers of runs, messages and sub-agent
// invocations.
package id

import (
	"math/rand/v2"
	"strconv"
)

// New returns prefix followed by 64 random bits in base 36: unique for all
// practical purposes, cheap, and safe for concurrent use.
func New(prefix string) string {
	var buf [32]byte
	b := append(buf[:0], prefix...)
	b = strconv.AppendUint(b, rand.Uint64(), 36)
	return string(b)
}
