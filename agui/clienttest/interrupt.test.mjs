// Interrupts and resume (AG-UI 1.0) with the official client, against the
// server named by AGUI_SERVER_CMD at its /agui-approval endpoint: a lead
// whose grandchild's "delete" tool asks for approval. The client sees the
// interrupt with the grandchild's subagentRunId, answers it in a second
// runAgent with resume, and the same sub-agent run continues to success;
// once with cancelled; once across a server restart on the same store file.
// Skipped without AGUI_SERVER_CMD, except under CI, where it fails.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, describe, test } from "node:test";
import { HttpAgent } from "@ag-ui/client";
import { checkSequence, checkWire } from "./lib/check.mjs";

const cmd = process.env.AGUI_SERVER_CMD;
const inCI = Boolean(process.env.CI) && process.env.CI !== "false";
const here = dirname(fileURLToPath(import.meta.url));
const root = process.env.AGUI_SERVER_CWD ?? join(here, "..", "..");
const dir = mkdtempSync(join(tmpdir(), "agui-interrupts-"));
const servers = [];

/** Starts the server with AGUI_STORE=store; resolves to { url, stop }. */
function start(store) {
  const p = spawn(cmd, { shell: true, cwd: root, detached: true, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, AGUI_STORE: store } });
  let stderr = "";
  p.stderr.setEncoding("utf8");
  p.stderr.on("data", (s) => (stderr = (stderr + s).slice(-16384)));
  const exited = new Promise((r) => p.once("exit", r));
  const srv = {
    stderr: () => stderr,
    async stop() {
      try {
        process.kill(-p.pid, "SIGTERM");
      } catch {
        return;
      }
      await exited;
    },
  };
  servers.push(srv);
  return new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`no URL within 60 s\n${stderr}`)), 60_000);
    p.stdout.setEncoding("utf8");
    p.stdout.on("data", (s) => {
      if (srv.url) return;
      out += s;
      const m = out.match(/https?:\/\/\S+/);
      if (m && out.includes("\n")) {
        clearTimeout(timer);
        srv.url = m[0].replace(/\/agui$/, "/agui-approval");
        resolve(srv);
      }
    });
    p.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the server exited (${code})\n${stderr}`));
    });
  });
}

after(async () => {
  for (const s of servers) await s.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** One runAgent of agent, with the events it delivered, checked. */
async function run(agent, params, resumes = []) {
  const events = [];
  await agent.runAgent(params, { onEvent: ({ event }) => events.push(event) });
  assert.deepEqual(checkWire(events), [], "every event passes @ag-ui/core EventSchemas");
  assert.deepEqual(checkSequence(events, { resumes }), [], "deputy's sequence rules");
  const last = events.at(-1);
  assert.equal(last.type, "RUN_FINISHED");
  return { events, last };
}

const started = (events, name) => events.find((e) => e.type === "SUBAGENT_STARTED" && e.name === name)?.subagentRunId;

/**
 * RUN_FINISHED's usage has one TokenUsage per provider and model. Each of
 * the tree's three agents has a model of its own, and each run makes one
 * call of each: 10 input and 2 output tokens. The resumed run reports the
 * whole turn (each is the first run's call and its own), so `each` is
 * "10+2=12" for the first run and "20+4=24" for the resumed one.
 */
function checkUsage(usage, which, each) {
  assert.ok(Array.isArray(usage), `${which}: RUN_FINISHED carries usage`);
  const got = usage.map((u) => `${u.provider}/${u.model} ${u.inputTokens}+${u.outputTokens}=${u.totalTokens}`).sort();
  assert.deepEqual(got, [
    `scripted/cleaner-model ${each}`,
    `scripted/janitor-model ${each}`,
    `scripted/lead-model ${each}`,
  ], `${which}: one entry per provider and model`);
}

let seq = 0;
async function roundTrip(first, { status, payload, want, restart }) {
  seq++;
  const threadId = `interrupts-${process.pid}-${seq}`;
  const messages = [{ id: "u1", role: "user", content: "tidy up" }];
  const a1 = new HttpAgent({ url: first.url, threadId, initialMessages: messages });
  const r1 = await run(a1, { runId: `${threadId}-1` });
  assert.equal(r1.last.outcome?.type, "interrupt", `the run ends with an interrupt: ${JSON.stringify(r1.last)}`);
  assert.equal(r1.last.outcome.interrupts.length, 1);
  const it = r1.last.outcome.interrupts[0];
  const cleaner = started(r1.events, "cleaner");
  assert.ok(cleaner, "the grandchild was announced");
  assert.equal(it.subagentRunId, cleaner, "the interrupt names the grandchild's run");
  assert.equal(it.reason, "tool_approval");
  const suspended = r1.events.find((e) => e.type === "SUBAGENT_FINISHED" && e.subagentRunId === cleaner);
  assert.deepEqual(suspended?.outcome, { type: "suspended", interruptIds: [it.id] });
  checkUsage(r1.last.usage, "the interrupted run", "10+2=12");

  let second = first;
  if (restart) {
    await first.stop();
    second = await restart();
  }
  const a2 = new HttpAgent({ url: second.url, threadId, initialMessages: a1.messages });
  const entry = { interruptId: it.id, status };
  if (payload !== undefined) entry.payload = payload;
  const r2 = await run(a2, { runId: `${threadId}-2`, resume: [entry] }, r1.events);
  assert.ok(!r2.last.outcome || r2.last.outcome.type === "success", `the resumed run succeeds: ${JSON.stringify(r2.last.outcome)}`);
  assert.equal(started(r2.events, "cleaner"), cleaner, "the resumed run continues the same sub-agent run");
  checkUsage(r2.last.usage, "the resumed run", "20+4=24");
  assert.match(String(r2.last.result), want);
  // What a chat UI shows after approve-and-resume: the lead's part is the
  // user's message, its one tool call, that call's one result and the one
  // answer; every message (the sub-agents' too) appears once, and every
  // tool call has exactly one result. The models name their calls afresh
  // on every request; nothing is wrapped.
  const all = JSON.stringify(a2.messages);
  const lead = a2.messages.filter((m) => m.subagentRunId === undefined);
  const leadCall = lead.find((m) => m.role === "assistant" && m.toolCalls?.length)?.toolCalls[0].id;
  assert.deepEqual(lead.map((m) => [m.role, m.toolCalls?.map((c) => c.function.name).join(",") ?? "", m.role === "tool" ? m.toolCallId : ""]), [
    ["user", "", ""],
    ["assistant", "janitor", ""],
    ["tool", "", leadCall],
    ["assistant", "", ""],
  ], `the lead's transcript: ${all}`);
  const ids = a2.messages.map((m) => m.id);
  assert.equal(new Set(ids).size, ids.length, `a message appears twice: ${all}`);
  const calls = a2.messages.flatMap((m) => m.toolCalls ?? []).map((c) => c.id);
  for (const id of calls) {
    const results = a2.messages.filter((m) => m.role === "tool" && m.toolCallId === id);
    assert.equal(results.length, 1, `tool call ${id} has ${results.length} results: ${all}`);
    assert.notEqual(results[0].content, "", `tool call ${id} has an empty result: ${all}`);
  }
  assert.equal(calls.length, 3, `three tool calls in the tree: ${all}`);
}

describe("AG-UI interrupts with @ag-ui/client 1.0.0", { skip: !cmd && !inCI && "AGUI_SERVER_CMD is not set" }, () => {
  test("approved: the grandchild's call runs", { timeout: 120_000 }, async () => {
    assert.ok(cmd, "AGUI_SERVER_CMD must be set when CI is set");
    const srv = await start(join(dir, "a.db"));
    await roundTrip(srv, { status: "resolved", payload: { approved: true }, want: /deleted \/tmp\/old\.log/ });
    await roundTrip(srv, { status: "cancelled", want: /cancelled/ });
    assert.doesNotMatch(srv.stderr(), /\bpanic:|DATA RACE/);
  });

  test("resumed by a restarted server on the same store", { timeout: 120_000 }, async () => {
    assert.ok(cmd, "AGUI_SERVER_CMD must be set when CI is set");
    const store = join(dir, "restart.db");
    const first = await start(store);
    await roundTrip(first, { status: "resolved", payload: { approved: true }, want: /deleted/, restart: () => start(store) });
  });
});
