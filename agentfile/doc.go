// Package agentfile loads sub-agents defined in files: Claude Code's
// Markdown agent files (YAML front matter, the body as the system prompt)
// and a YAML form with the same keys, into a Roster of subagent tools.
//
// Loading is strict. Every problem of every file — an unknown key, a value
// of the wrong type, a tool the program does not have, a model no
// provider serves, a name given twice, a file that is not UTF-8 — is an
// *Error that names the file and line and says what to do, and a
// directory loads all or nothing. Nothing is skipped silently.
//
//	loader, err := agentfile.NewLoader(
//		agentfile.WithProvider("anthropic", p, "claude-sonnet-4-5", "claude-haiku-4-5"),
//		agentfile.WithModelAlias("sonnet", "claude-sonnet-4-5"),
//		agentfile.WithModelAlias("haiku", "claude-haiku-4-5"),
//		agentfile.WithTools(reg),
//	)
//	roster, err := loader.LoadDir(".claude/agents")
//	lead, err := agent.NewReact(p, agent.WithTools(roster.Tools()...))
//
// # The format
//
// A complete Markdown definition, every key deputy reads:
//
//	---
//	name: code-reviewer
//	description: Reviews a change for bugs and risky code. Use after every edit.
//	tools: read_file, grep, mcp__github__*, Agent(test-runner)
//	disallowedTools: [delete_file]
//	model: sonnet
//	maxTurns: 12
//	background: false
//	color: purple
//	mcpServers: [github]
//	hooks:
//	  PreToolUse:
//	    - matcher: "read_file|grep"
//	      hooks:
//	        - type: command
//	          command: audit-log
//	output: {file: schemas/review.json}
//	tokenLimit: 200000
//	costLimit: 0.50
//	timeout: 5m
//	maxDepth: 2
//	---
//	You review code changes. Read the files the task names, find what is
//	wrong, and answer with the findings.
//
// The keys, as Claude Code reads them where deputy has the feature:
//
//   - name (required): the tool's name, 1 to 64 letters, digits, '-'
//     and '_'. A name Claude Code would skip (one with ':') is an error here.
//   - description (required): what the delegating model reads to choose.
//   - tools: a comma-separated text or a list. Each entry is a tool name of
//     the registry given with WithTools, a pattern (path.Match: read_*,
//     mcp__github__*), or Agent(a, b) (Task(a, b) too): the roster's
//     sub-agents it may delegate to; bare Agent means all of them. Left
//     out, the sub-agent gets every tool of the registry and delegates to
//     none; [] gives it none. An entry that names no tool is an error.
//   - disallowedTools: entries as in tools, removed from what it gets.
//   - model: inherit (the default: the first provider registered), an
//     alias (WithModelAlias: sonnet, haiku, opus, …) or a model id that a
//     provider lists (WithProvider).
//   - maxTurns: the ReAct steps the sub-agent may take (agent.WithMaxSteps).
//   - background: true lets the roster's spawn tool start members as
//     background jobs (Roster.SpawnOptions adds subagent.WithBackground);
//     in deputy the delegating model chooses per spawn.
//   - color: kept in Definition.Color for a program that shows it.
//   - mcpServers: names of MCP servers the program allows (WithMCPServer);
//     their tools join the sub-agent's, and tools and disallowedTools may
//     name them as mcp__<server>__<tool>. A server defined in the file (a
//     mapping, which would start a process) is refused.
//   - hooks: PreToolUse and PostToolUse groups of {matcher, hooks: [{type:
//     command, command}]}. A command is a name the program trusts
//     (WithHook), never something run; the matcher is a regular expression
//     over tool names.
//
// deputy's own keys, which Claude Code ignores:
//
//   - prompt: the system prompt, in the YAML form (a Markdown file's is
//     its body).
//   - output: the result contract, checked by subagent's validator with
//     its one corrective retry: report (subagent.WithReport), {type:
//     Name} (a Go type registered with ResultType), {schema: {…}} (an
//     inline JSON Schema) or {file: path} (a .json file in the directory,
//     by a relative path that stays inside it).
//   - tokenLimit, costLimit (dollars; prices through WithReactOptions),
//     timeout (a Go duration), maxDepth (how deep the sub-agent may run;
//     by default 1, or deep enough for the Agent(…) that delegate to it).
//
// Claude Code's keys deputy does not implement — permissionMode, skills,
// memory, effort, isolation, initialPrompt, and hook events other than
// PreToolUse and PostToolUse — are errors naming the key and its line, or
// warnings (Roster.Warnings) under WithUnsupported(Warn). Any other key
// is an error.
//
// The YAML form is one mapping with the same keys and prompt:
//
//	name: summarizer
//	description: Summarizes a document in five lines.
//	model: haiku
//	tools: []
//	output: report
//	prompt: |
//	  You summarize. Answer with five lines at most.
//
// # Bounds
//
// Files are untrusted. A directory holds at most DefaultMaxFiles
// definitions (WithMaxFiles) of at most DefaultMaxFileBytes each
// (WithMaxFileBytes); its YAML nests at most 32 levels, holds at most 16
// aliases and expands, aliases followed, to at most 10,000 nodes; a NUL
// byte or text that is not UTF-8 is refused; a schema file is named by a
// clean relative path and read through the directory's os.Root, so that
// no name or link leaves it; an inline or file schema is compiled as
// jsonschema.CompileUntrusted compiles one.
//
// # The roster and the journal
//
// Each definition becomes one subagent.FromFactory tool (Roster.Members,
// Roster.Tools; Roster.SpawnOptions for spawn_subagent), whose every run
// builds a fresh agent.React with the file's prompt, model, tools and
// limits. Each run emits a DefinitionEvent with the definition's Hash.
// Under agent.WithJournal, an invocation records its definition's Hash
// in the journal when it starts; a finished invocation is replayed from
// the journal as it ran, whatever the files say now, and one that
// continues on a resumed turn checks the Hash and fails with ErrChanged
// when the definition is not the one it started with. A Roster never
// changes: reloading a directory makes a new one, and a run keeps the one
// it started with.
//
// # A model menu by the same names
//
// Loader.ModelMenu gives the spawn tool a menu of the models its forks
// may run on (subagent.WithModelMenu), named as definitions name them: by
// alias, model id or inherit, each resolved to the provider that serves
// it.
package agentfile
