package agentfile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agentfile"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/benchcpu"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// BenchmarkLoad measures loading a directory of 100 definitions through
// LoadDir: listing it, reading, checking and parsing each file, resolving
// its tools (patterns too), model, hooks and result contract (a schema file
// for a quarter of them, compiled), and building its sub-agent tool and
// registry. The target is 20 ms.
func BenchmarkLoad(b *testing.B) {
	dir := b.TempDir()
	write(b, dir, "schemas/review.json", `{"type":"object","properties":{"verdict":{"enum":["approve","request_changes"]},"findings":{"type":"array","items":{"type":"string"}}},"required":["verdict","findings"],"additionalProperties":false}`)
	for i := range 100 {
		var text string
		switch i % 4 {
		case 0:
			text = fmt.Sprintf(`---
name: reviewer-%d
description: >
  Reviews a change for bugs, risky code and missing tests.
  Use it after every edit, before a commit.
tools: read_file, grep, mcp__github__*
disallowedTools: [delete_file]
model: sonnet
maxTurns: 12
color: purple
mcpServers: [github]
hooks:
  PreToolUse:
    - matcher: "read_file|grep"
      hooks:
        - type: command
          command: audit-log
output: {file: schemas/review.json}
tokenLimit: 200000
timeout: 5m
---
You review code changes.

Read the files the task names, find what is wrong, and answer with the
findings as JSON that fits the schema you are given.
`, i)
		case 1:
			text = fmt.Sprintf("---\nname: runner-%d\ndescription: Runs the tests and reports failures.\ntools:\n  - run_tests\n  - read_*\nmodel: haiku\nmaxTurns: 5\n---\nYou run tests. Report each failing test with its first error line.\n", i)
		case 2:
			text = fmt.Sprintf("name: summarizer-%d\ndescription: Summarizes a document in five lines.\ntools: []\noutput: report\nprompt: |\n  You summarize documents.\n  Answer with five lines at most.\n", i)
		default:
			text = fmt.Sprintf("---\nname: planner-%d\ndescription: Breaks a goal into steps.\ntools: [grep]\noutput:\n  schema:\n    type: object\n    properties:\n      steps: {type: array, items: {type: string}, maxItems: 20}\n    required: [steps]\n---\nYou plan. Break the goal into at most twenty concrete steps.\n", i)
		}
		ext := ".md"
		if i%4 == 2 {
			ext = ".yaml"
		}
		write(b, dir, fmt.Sprintf("agent-%03d%s", i, ext), text)
	}
	l := programLoader(b)
	defer benchcpu.Report(b)()
	b.ReportAllocs()
	for b.Loop() {
		r, err := l.LoadDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Members()) != 100 {
			b.Fatalf("%d members", len(r.Members()))
		}
	}
}

// BenchmarkDelegation measures one parent run with one delegation, as
// subagent's BenchmarkDelegation does (two ReAct runs, three model calls on
// the looping fake provider, events off), to a child defined in Go
// (FromFactory building a ReAct agent with its name and system prompt) and
// to the same child loaded from a file. The target for file is go plus 5%.
func BenchmarkDelegation(b *testing.B) {
	const answer = "There are 3 files."
	p := fake.NewProvider(
		fake.Call("child", `{"task":"count the files"}`).For("lead"),
		fake.Text("Done: 3 files.").For("lead"),
		fake.Text(answer).For("child"),
	).Loop().DontRecord()
	goChild := func(b *testing.B) *subagent.SubAgentTool {
		opts := []agent.Option{agent.WithName("child"), agent.WithSystemPrompt("You count files.")}
		t, err := subagent.FromFactory("child", "Counts files.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, opts...)
		})
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	fileChild := func(b *testing.B) *subagent.SubAgentTool {
		dir := b.TempDir()
		write(b, dir, "child.md", "---\nname: child\ndescription: Counts files.\ntools: []\n---\nYou count files.\n")
		l, err := agentfile.NewLoader(agentfile.WithProvider("fake", p))
		if err != nil {
			b.Fatal(err)
		}
		r, err := l.LoadDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		t, _ := r.Member("child")
		return t
	}
	// file/go alternates batches of 200 delegations of each and reports
	// the ratio of their fastest batches (x-go): on a machine other work
	// shares, the fastest batch of each is the one least disturbed.
	b.Run("file/go", func(b *testing.B) {
		leads := make([]*agent.React, 2)
		for i, child := range []func(*testing.B) *subagent.SubAgentTool{goChild, fileChild} {
			var err error
			if leads[i], err = agent.NewReact(p, agent.WithName("lead"), agent.WithTools(child(b))); err != nil {
				b.Fatal(err)
			}
		}
		ctx := context.Background()
		in := agent.Input{Text: "How many files?"}
		best := []time.Duration{time.Hour, time.Hour}
		const batch = 200
		for b.Loop() {
			for i, lead := range leads {
				start := time.Now()
				for range batch {
					lead.Reset()
					if _, err := lead.Run(ctx, in); err != nil {
						b.Fatal(err)
					}
				}
				best[i] = min(best[i], time.Since(start))
			}
		}
		b.ReportMetric(float64(best[0].Nanoseconds())/batch, "go-ns/delegation")
		b.ReportMetric(float64(best[1].Nanoseconds())/batch, "file-ns/delegation")
		b.ReportMetric(float64(best[1])/float64(best[0]), "x-go")
	})
	for _, c := range []struct {
		name  string
		child func(*testing.B) *subagent.SubAgentTool
	}{{"go", goChild}, {"file", fileChild}} {
		b.Run(c.name, func(b *testing.B) {
			lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(c.child(b)))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			in := agent.Input{Text: "How many files?"}
			defer benchcpu.Report(b)()
			b.ReportAllocs()
			for b.Loop() {
				lead.Reset()
				out, err := lead.Run(ctx, in)
				if err != nil {
					b.Fatal(err)
				}
				if out.ChildUsage.Requests != 1 || out.Messages[2].Content != answer {
					b.Fatalf("the delegation did not happen as scripted: %+v", out.Messages)
				}
			}
		})
	}
}

var _ provider.Provider = (*fake.Provider)(nil)
