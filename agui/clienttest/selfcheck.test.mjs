// Self-check: proves the validators in lib/ against a hand-written stream
// (fixtures/two-children.json) before any server exists, and proves they
// catch the mistakes they are meant to catch. The fixture goes through the
// real HttpAgent with fetch replaced, so the client's transport, enforcement,
// verification and reducer all see it exactly as they would see a server.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { HttpAgent } from "@ag-ui/client";
import { HttpAgent as LegacyHttpAgent } from "ag-ui-client-legacy";
import { checkSequence, checkWire, encodeSSE, runClient } from "./lib/check.mjs";
import { USER_MESSAGE, assertClientState, assertConforming, assertTwoChildren } from "./lib/scenario.mjs";

const fixture = JSON.parse(readFileSync(new URL("./fixtures/two-children.json", import.meta.url), "utf8"));
const THREAD = "thread-1";
const RUN = "run-1";

function serve(events) {
  return async () => new Response(encodeSSE(events), { status: 200, headers: { "content-type": "text/event-stream" } });
}

function replay(Agent, events) {
  return runClient(Agent, {
    threadId: THREAD,
    runId: RUN,
    messages: [structuredClone(USER_MESSAGE)],
    fetchImpl: serve(events),
  });
}

const hidden = (events) => events.filter((e) => !e.type.startsWith("SUBAGENT_"));
const find = (events, pred) => {
  const i = events.findIndex(pred);
  assert.ok(i >= 0, "the mutation's anchor exists in the fixture");
  return i;
};

describe("the fixture", () => {
  test("passes the wire and sequence checks and has the two-children shape", () => {
    assert.deepEqual(checkWire(fixture), []);
    assert.deepEqual(checkSequence(fixture), []);
    assertTwoChildren(fixture);
  });

  test("is accepted by @ag-ui/client 1.0.0 unchanged and without warnings", async () => {
    const run = await replay(HttpAgent, fixture);
    assertTwoChildren(assertConforming(run, { threadId: THREAD, runId: RUN }));
    assertClientState(run.agent, new Map([["sub-a"], ["sub-b"]]));
    assert.equal(run.result.result, fixture.at(-1).result, "runAgent resolves with RUN_FINISHED.result");
  });

  test("with SUBAGENT_* hidden: still conforming, attribution intact", async () => {
    const events = hidden(fixture);
    assert.deepEqual(checkSequence(events, { lifecycle: false }), []);
    const run = await replay(HttpAgent, events);
    assertTwoChildren(assertConforming(run, { threadId: THREAD, runId: RUN, lifecycle: false }), { lifecycle: false });
  });

  test("the last client without sub-agent support (0.0.58) fails on SUBAGENT_* and accepts the hidden stream", async () => {
    await assert.rejects(replay(LegacyHttpAgent, fixture), /SUBAGENT_STARTED|invalid_union_discriminator|Invalid discriminator/);
    const run = await replay(LegacyHttpAgent, hidden(fixture));
    assert.equal(run.events.at(-1).type, "RUN_FINISHED");
  });
});

// Each case breaks the fixture in one way; the named layer must notice.
const broken = [
  {
    name: "a Go omitempty dropping an empty TEXT_MESSAGE_CONTENT.delta",
    mutate(ev) {
      delete ev[find(ev, (e) => e.type === "TEXT_MESSAGE_CONTENT")].delta;
    },
    wire: /delta/,
    client: true,
  },
  {
    name: "an empty delta",
    mutate(ev) {
      ev[find(ev, (e) => e.type === "TEXT_MESSAGE_CONTENT")].delta = "";
    },
    sequence: /empty delta/,
  },
  {
    name: "TOOL_CALL_RESULT without content",
    mutate(ev) {
      delete ev[find(ev, (e) => e.type === "TOOL_CALL_RESULT")].content;
    },
    wire: /content/,
    client: true,
  },
  {
    name: "a field the event type does not have (subagentRunId on RUN_FINISHED)",
    mutate(ev) {
      ev.at(-1).subagentRunId = "sub-a";
    },
    wire: /"subagentRunId" is not part of RUN_FINISHED/,
  },
  {
    name: "a string timestamp",
    mutate(ev) {
      ev[0].timestamp = String(ev[0].timestamp);
    },
    wire: /timestamp/,
    client: true,
  },
  {
    name: "a role outside developer|system|assistant|user on TEXT_MESSAGE_START",
    mutate(ev) {
      ev[find(ev, (e) => e.type === "TEXT_MESSAGE_START")].role = "tool";
    },
    wire: /role/,
    client: true,
  },
  {
    name: "RUN_FINISHED without threadId",
    mutate(ev) {
      delete ev.at(-1).threadId;
    },
    wire: /threadId/,
    client: true,
  },
  {
    name: "RUN_FINISHED while a sub-agent is open",
    mutate(ev) {
      const i = find(ev, (e) => e.type === "SUBAGENT_FINISHED" && e.subagentRunId === "sub-b");
      ev.push(ev.splice(i, 1)[0]); // after RUN_FINISHED
    },
    sequence: /sub-agent "sub-b" is still open/,
    client: true,
  },
  {
    name: "an event attributed to a sub-agent that already finished",
    mutate(ev) {
      const i = find(ev, (e) => e.type === "SUBAGENT_FINISHED" && e.subagentRunId === "sub-a");
      const j = find(ev, (e) => e.type === "TEXT_MESSAGE_END" && e.subagentRunId === "sub-a");
      const [fin] = ev.splice(i, 1);
      ev.splice(j, 0, fin); // finish sub-a before its message ends
    },
    sequence: /sub-agent "sub-a", which has already finished/,
  },
  {
    name: "an event attributed to a sub-agent that was never started",
    mutate(ev) {
      const i = find(ev, (e) => e.type === "TEXT_MESSAGE_START" && e.subagentRunId === "sub-a");
      for (const e of ev.slice(i)) if (e.subagentRunId === "sub-a" && !e.type.startsWith("SUBAGENT_")) e.subagentRunId = "sub-x";
    },
    sequence: /"sub-x", which was never started/,
  },
  {
    name: "a SUBAGENT_STARTED whose parentToolCallId matches no tool call",
    mutate(ev) {
      ev[find(ev, (e) => e.type === "SUBAGENT_STARTED")].parentToolCallId = "call-zzz";
    },
    sequence: /names no earlier TOOL_CALL_START/,
  },
  {
    name: "the spawning tool call's result before its sub-agent finished",
    mutate(ev) {
      const i = find(ev, (e) => e.type === "TOOL_CALL_RESULT" && e.toolCallId === "call-b");
      const [res] = ev.splice(i, 1);
      ev.splice(find(ev, (e) => e.type === "SUBAGENT_STARTED" && e.subagentRunId === "sub-b") + 1, 0, res);
    },
    sequence: /while its sub-agent "sub-b" is still open/,
  },
  {
    name: "a continuation attributed to another sub-agent than its opener",
    mutate(ev) {
      ev[find(ev, (e) => e.type === "TEXT_MESSAGE_CONTENT" && e.subagentRunId === "sub-a")].subagentRunId = "sub-b";
    },
    sequence: /belongs to sub-agent "sub-a"/,
    client: true,
  },
  {
    name: "two open steps with one name under different owners (breaks clients up to 0.0.58)",
    mutate(ev) {
      for (const e of ev) if (e.stepName === "sub-a/turn-1") e.stepName = "sub-b/turn-1";
    },
    sequence: /step "sub-b\/turn-1" is already open/,
  },
  {
    name: "a sub-agent closed twice",
    mutate(ev) {
      const i = find(ev, (e) => e.type === "SUBAGENT_FINISHED");
      ev.splice(i + 1, 0, structuredClone(ev[i]));
    },
    sequence: /already finished/,
    client: true,
  },
  {
    name: "a text message content event after its end",
    mutate(ev) {
      const i = find(ev, (e) => e.type === "TEXT_MESSAGE_END" && e.messageId === "msg-p2");
      ev.splice(i + 1, 0, { type: "TEXT_MESSAGE_CONTENT", messageId: "msg-p2", delta: "late" });
    },
    sequence: /"msg-p2" is not open/,
    client: true,
  },
];

describe("the checks catch broken streams", () => {
  for (const c of broken) {
    test(c.name, async () => {
      const events = structuredClone(fixture);
      c.mutate(events);
      const wire = checkWire(events);
      if (c.wire) assert.match(wire.join("\n"), c.wire, "checkWire reports it");
      if (c.sequence) assert.match(checkSequence(events).join("\n"), c.sequence, "checkSequence reports it");
      if (c.client) {
        await assert.rejects(replay(HttpAgent, events), "@ag-ui/client 1.0.0 rejects the run");
      }
    });
  }
});
