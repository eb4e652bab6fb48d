package cassette_test

import (
	"maps"
	"slices"
	"strconv"
)

func itoa(n int) string { return strconv.Itoa(n) }

func keys(m map[string]int) []string { return slices.Sorted(maps.Keys(m)) }
