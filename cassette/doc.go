// Package cassette records the model calls of a whole delegation tree once
// and replays them in `go test`, with no model: a test of a tree runs on
// what a live model answered, not on a script written by hand that drifts
// from it.
//
//	var record = cassette.RecordFlag() // -deputy.record
//
//	func TestTree(t *testing.T) {
//		p := cassette.Open(t, "testdata/tree.jsonl", live, *record)
//		lead := buildTree(p) // every agent of the tree on p, at any depth
//		out, err := lead.Run(ctx, agent.Input{Text: "…"})
//		…
//	}
//
// `go test` replays testdata/tree.jsonl; `go test -deputy.record='*'`
// records it through live; `-deputy.record='lead/critic@*'` records again
// only the calls of the critic nodes and keeps the rest.
//
// # Keys
//
// Each model call is keyed by its place in the tree (Position: the chain of
// sub-agent invocations and the tool calls that started them, such as
// "lead/researcher@1.3/critic@2.0"), its step among the calls made at that
// place, and the hash of its request with what changes from run to run left
// out (Request: tool call ids numbered, the model, the output bound and the
// cache key left out). Parallel siblings have places of their own, so they
// replay whatever order they run in, at any GOMAXPROCS.
//
// # Replay and misses
//
// Replay answers from a Cassette, which one test loads once (Load) and any
// number of runs share. A call the cassette has no answer for fails with a
// *MissError that names its place, what it asked and how that differs from
// the nearest recorded call; Open reports it on the test at once. A parent
// whose child missed reads the child's failure as a tool error and asks
// with it: that call is a MissError too, marked Consequence, leading to the
// first.
//
// # Recording
//
// Record passes every call to a live provider (openai, anthropic, an
// Admission, a fake) and records it; Rerecord records only the calls whose
// places match a pattern and replays the rest. The mode is chosen by the
// test (RecordFlag or a literal), never by the environment.
//
// # Forking
//
// Fork replays a recorded run up to the nodes a pattern names and goes on
// from them on another provider, model or prompt: the named nodes, the
// later calls of the agents above them and the sub-agents those calls
// start run on it; everything else is replayed, with no call to it.
// treetest.CompareRuns sets the two runs side by side.
//
// # The file
//
// A cassette is a JSON lines file: a header, then one Entry a line, sorted
// by place and step, so that a re-recording differs from the old file only
// where the calls did. A file read back (Load, Read) is bounded (MaxBytes,
// MaxLineBytes, MaxEntries) and checked: an entry whose hash is not its
// request's, a file cut short, an unknown field, two entries for one call
// are each an ErrBadCassette saying which line is wrong.
package cassette
