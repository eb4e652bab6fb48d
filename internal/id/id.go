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
	return string(Append(buf[:0], prefix))
}

// Append appends an id made as New makes it to dst, for a caller that
// builds the id and more in one allocation.
func Append(dst []byte, prefix string) []byte {
	dst = append(dst, prefix...)
	return strconv.AppendUint(dst, rand.Uint64(), 36)
}
