// Package treetest tests what a delegation tree did, as code: assertions
// on the nodes of a subagent.Tree named by their paths, a golden dump
// that holds whatever order parallel children ran in, and evaluators that
// score answers (deterministic ones and a model-graded judge), emitted as
// OpenTelemetry events and summed up over a dataset run many times.
// Run the tree on a cassette (package cassette) and the test needs no
// model.
//
//	tree := subagent.NewTree(nil)
//	out, err := lead.Run(event.WithSink(ctx, tree), agent.Input{Text: "…"})
//	tr := treetest.New(t, tree)
//	tr.Nodes("research").Count(3).Each(treetest.State(subagent.StateSucceeded))
//	tr.Nodes("**/analyst").Count(48).Each(treetest.MaxTokens(2000))
//	tr.Nodes("research#1/analyst").WithArgs(`{"task":"topic 1 part 3"}`).Count(1).Each(treetest.Status("partial"))
//
// # Paths
//
// A node's path is the names of the sub-agents that led to it, from the
// top-level run's calls, separated by "/": "research#1/analyst#3". When a
// parent called more than one sub-agent of a name, "#" and the order of
// the call among them tell them apart; children are in the order of
// their calls (subagent.Tree orders them so), never in the order they
// finished. A pattern (Match) matches each part as path.Match does; a part
// without "#" matches every sibling of that name, and "**" any number of
// parts.
//
// # Assertions
//
// Tree.Nodes selects nodes by pattern, Selection.WithArgs by their
// arguments (a field "*" matches any value), Selection.InState by their
// state (a hand-off a limit refused is a node in subagent.StateRefused,
// which never ran), Selection.Count asserts how many, and Selection.Each
// asserts Checks on each: State, Status (the report of
// subagent.ResultSchema), Retries (how many times the validator asked it
// again), AnswerContains, MaxTokens (the node and its sub-agents),
// MaxOwnTokens, MaxCost (the node and its sub-agents), MaxOwnCost, or any
// func of yours. Tree.Approvals counts the approvals a run asked, and
// Tree.Refused the calls and hand-offs its policy refused, which start no
// node. A failure names the node by its path and shows the
// tree around it. Tree.Dump is the golden form.
//
// # Scoring
//
// An Evaluator scores an answer from 0 to 1, with a label and an
// explanation: Equals, Contains, MatchesSchema and Func are
// deterministic; Judge asks a model on any Provider (a cassette's, so
// that the judge replays too). A Scorer applies Rules (a pattern and its
// evaluators; the empty pattern is the run's own answer) to a run and
// returns a Report; with a Logger, each score is also the OpenTelemetry
// event gen_ai.evaluation.result (gen_ai.evaluation.name,
// gen_ai.evaluation.score.value, .score.label, .explanation), parented to
// the span of the node it scored, which Spans, a span processor, found.
//
// # Datasets
//
// A Dataset runs each Case Runs times, scores each run, and sums up per
// case, node and evaluator: how many passed, the mean score, pass@k and
// pass^k. Results stored as JSON are the baseline of a later run:
// Results.Compare says what improved and what regressed, and
// Comparison.Markdown and Results.Markdown print it.
//
// # Two runs side by side
//
// CompareRuns sets two runs of a tree (a recorded one and its fork onto
// another model, cassette.Fork) side by side, node by node: how each
// ended, which model answered, what it spent and cost. Its String is a
// table.
package treetest
