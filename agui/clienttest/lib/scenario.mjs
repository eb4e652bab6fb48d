// The scenario contract: what the test server is asked for and what every
// answer must look like. README.md describes the same contract in prose.

import assert from "node:assert/strict";
import { checkSequence, checkWire, children, parseSSE } from "./check.mjs";

/** Request header that asks the server to leave SUBAGENT_* events out. */
export const HIDE_HEADER = "Deputy-Subagent-Events";
export const HIDE_VALUE = "hide";

export const USER_MESSAGE = { id: "user-1", role: "user", content: "research two topics" };

/** Asserts the wire and client-side facts every successful run must show. */
export function assertConforming(run, { threadId, runId, lifecycle = true }) {
  const { events, warnings, raw } = run;
  assert.equal(raw.status, 200, "HTTP status");
  assert.match(raw.contentType ?? "", /^text\/event-stream\b/, "Content-Type");
  assert.equal(typeof raw.text, "string", "the response body was read");

  const sse = parseSSE(raw.text);
  assert.deepEqual(sse.problems, [], "SSE framing");
  assert.deepEqual(checkWire(sse.events), [], "every event passes @ag-ui/core EventSchemas, with no unknown fields");
  // What the client delivered is what the server sent: nothing dropped as
  // unrecognised, no field stripped.
  assert.deepEqual(events, sse.events, "events delivered by the client equal the events on the wire");
  assert.deepEqual(warnings, [], "the client printed no warnings");
  assert.deepEqual(checkSequence(sse.events, { lifecycle }), [], "deputy's sequence rules");

  const first = sse.events[0];
  const last = sse.events.at(-1);
  assert.equal(first.type, "RUN_STARTED");
  assert.equal(first.threadId, threadId, "RUN_STARTED.threadId echoes the request");
  assert.equal(first.runId, runId, "RUN_STARTED.runId echoes the request");
  assert.equal(last.type, "RUN_FINISHED");
  assert.equal(last.threadId, threadId, "RUN_FINISHED.threadId echoes the request");
  assert.equal(last.runId, runId, "RUN_FINISHED.runId echoes the request");
  return sse.events;
}

/**
 * Asserts the two-children tree: two sub-agents, each under its own tool call
 * of the parent, each with attributed text, each closed exactly once.
 * failed names how many of them must end in SUBAGENT_ERROR.
 */
export function assertTwoChildren(events, { lifecycle = true, failed = 0 } = {}) {
  const tree = children(events);
  assert.equal(tree.size, 2, `exactly two sub-agents appear (got ${[...tree.keys()].join(", ")})`);
  for (const [id, child] of tree) {
    assert.ok(child.contentEvents > 0, `sub-agent "${id}" has attributed TEXT_MESSAGE_CONTENT`);
    assert.notEqual(child.text.trim(), "", `sub-agent "${id}" wrote some text`);
  }
  const starts = events.filter((e) => e.type === "SUBAGENT_STARTED");
  if (!lifecycle) {
    assert.equal(starts.length, 0, "no SUBAGENT_STARTED in hidden mode");
    for (const e of events) assert.ok(!e.type.startsWith("SUBAGENT_"), `hidden mode leaked ${e.type}`);
    return tree;
  }
  assert.equal(starts.length, 2, "exactly two SUBAGENT_STARTED");
  const parents = new Set(starts.map((s) => s.parentToolCallId));
  assert.equal(parents.size, 2, "the two sub-agents hang under distinct parentToolCallIds");
  for (const s of starts) {
    assert.equal(s.parentSubagentRunId, undefined, "top-level sub-agents have no parentSubagentRunId");
    assert.notEqual(s.name, "", "SUBAGENT_STARTED.name is set");
    const call = events.find((e) => e.type === "TOOL_CALL_START" && e.toolCallId === s.parentToolCallId);
    assert.ok(call, `parentToolCallId "${s.parentToolCallId}" matches a TOOL_CALL_START`);
    assert.equal(call.subagentRunId, undefined, "the spawning tool call belongs to the parent agent");
    assert.ok(events.indexOf(call) < events.indexOf(s), "the tool call starts before its sub-agent");
  }
  let errors = 0;
  for (const [id, child] of tree) {
    assert.ok(child.started, `sub-agent "${id}" was started`);
    assert.equal(child.terminals.length, 1, `sub-agent "${id}" ends exactly once`);
    if (child.terminals[0].type === "SUBAGENT_ERROR") {
      errors++;
      assert.notEqual(child.terminals[0].message, "", "SUBAGENT_ERROR.message is set");
    }
  }
  assert.equal(errors, failed, "number of sub-agents that ended in SUBAGENT_ERROR");
  // Every spawning tool call gets its result, after its sub-agent closed
  // (checkSequence enforces the order).
  for (const id of parents) {
    assert.ok(
      events.some((e) => e.type === "TOOL_CALL_RESULT" && e.toolCallId === id),
      `tool call "${id}" gets a TOOL_CALL_RESULT`,
    );
  }
  return tree;
}

/** Asserts that the client's reducer filed each child's text under its subagentRunId. */
export function assertClientState(agent, tree) {
  for (const id of tree.keys()) {
    assert.ok(
      agent.messages.some((m) => m.role === "assistant" && m.subagentRunId === id && m.content),
      `the client's messages hold an assistant message attributed to "${id}"`,
    );
  }
}
