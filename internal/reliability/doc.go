// Package reliability holds deputy's suites that prove its guarantees under
// faults, load and hostile input: a seeded chaos test over whole delegation
// trees, load tests of the sub-agent forms, and the bad-input table. It has
// no code of its own; RELIABILITY.md names the test behind each guarantee.
package reliability
