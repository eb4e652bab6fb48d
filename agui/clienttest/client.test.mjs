// End-to-end: the official AG-UI client (@ag-ui/client HttpAgent) against
// deputy's AG-UI endpoint.
//
// AGUI_SERVER_CMD is a shell command that starts the server on 127.0.0.1 and
// prints the endpoint URL as the first line of its stdout. It runs in the Go
// module root (the nearest directory above this one holding go.mod), or in
// AGUI_SERVER_CWD when that is set. CI runs:
//
//   cd agui/clienttest && npm ci && AGUI_SERVER_CMD="go run ./agui/internal/testserver" node --test
//
// Without AGUI_SERVER_CMD these tests are skipped, except under CI=true, where
// a missing server is a failure. README.md has the scenario contract.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import { HttpAgent } from "@ag-ui/client";
import { HttpAgent as LegacyHttpAgent } from "ag-ui-client-legacy";
import { runClient } from "./lib/check.mjs";
import {
  HIDE_HEADER,
  HIDE_VALUE,
  USER_MESSAGE,
  assertClientState,
  assertConforming,
  assertTwoChildren,
} from "./lib/scenario.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const cmd = process.env.AGUI_SERVER_CMD;
const inCI = Boolean(process.env.CI) && process.env.CI !== "false";
const STARTUP_TIMEOUT_MS = 300_000; // "go run" compiles first; CI machines are small

function moduleRoot(dir) {
  for (let d = dir; ; d = dirname(d)) {
    if (existsSync(join(d, "go.mod"))) return d;
    if (dirname(d) === d) return dir;
  }
}

let seq = 0;
function request(extra = {}) {
  seq++;
  return {
    threadId: `thread-e2e-${process.pid}-${seq}`,
    runId: `run-e2e-${process.pid}-${seq}`,
    messages: [structuredClone(USER_MESSAGE)],
    ...extra,
  };
}

/**
 * Starts the server command in the Go module root (or AGUI_SERVER_CWD) and
 * resolves to a handle once the first URL appears on its stdout (the first
 * line, possibly after a label). The handle's stop() ends the process group.
 */
function startServer(command) {
  const handle = { exited: undefined, stderr: "", url: undefined };
  const server = spawn(command, {
    shell: true,
    cwd: process.env.AGUI_SERVER_CWD ?? moduleRoot(here),
    detached: true, // own process group, so "go run" and the binary it built stop together
    stdio: ["ignore", "pipe", "pipe"],
  });
  handle.stop = async () => {
    if (handle.exited) return;
    const gone = new Promise((r) => server.once("exit", r));
    try {
      process.kill(-server.pid, "SIGTERM");
    } catch {
      return;
    }
    const timer = setTimeout(() => {
      try {
        process.kill(-server.pid, "SIGKILL");
      } catch {}
    }, 5000);
    await gone;
    clearTimeout(timer);
  };
  server.on("exit", (code, signal) => {
    handle.exited = { code, signal };
  });
  server.stderr.setEncoding("utf8");
  server.stderr.on("data", (s) => {
    handle.stderr = (handle.stderr + s).slice(-64 * 1024);
  });
  const ready = new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`no URL on the server's stdout within ${STARTUP_TIMEOUT_MS} ms\nstderr:\n${handle.stderr}`)), STARTUP_TIMEOUT_MS);
    server.stdout.setEncoding("utf8");
    server.stdout.on("data", (s) => {
      if (out.includes("\n")) return; // keep draining, so the server never blocks on a full pipe
      out += s;
      const nl = out.indexOf("\n");
      if (nl >= 0) {
        clearTimeout(timer);
        const found = out.slice(0, nl).match(/https?:\/\/\S+/);
        if (!found) reject(new Error(`the server's first line holds no URL: ${JSON.stringify(out.slice(0, nl))}`));
        else resolve(found[0]);
      }
    });
    server.on("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`the server exited (code ${code}, signal ${signal}) before printing its URL\nstderr:\n${handle.stderr}`));
    });
  });
  return ready.then(
    (url) => {
      assert.equal(new URL(url).hostname, "127.0.0.1", `the server listens on 127.0.0.1 (printed ${url})`);
      handle.url = url;
      return handle;
    },
    async (err) => {
      await handle.stop();
      throw err;
    },
  );
}

/** Asserts that the server is still running and reported no panic or race. */
function assertHealthy(srv) {
  assert.equal(srv.exited, undefined, `the server is still running\nstderr:\n${srv.stderr}`);
  assert.doesNotMatch(srv.stderr, /\bpanic:|DATA RACE/, "the server reported no panic or race");
}

/**
 * Runs turns requests of one thread with the official client, each sending
 * back every message the client kept (the sub-agents' too) plus a new user
 * message, as an application does. check(run, events, turn) checks each.
 */
async function converse(url, turns, { forwardedProps, check }) {
  seq++;
  const threadId = `thread-e2e-conversation-${process.pid}-${seq}`;
  let messages = [structuredClone(USER_MESSAGE)];
  for (let turn = 1; turn <= turns; turn++) {
    const req = { threadId, runId: `run-e2e-${process.pid}-${seq}-turn-${turn}`, messages, forwardedProps };
    const run = await runClient(HttpAgent, { url, ...req });
    assert.equal(run.raw.status, 200, `turn ${turn}: HTTP status (body: ${run.raw.text?.slice(0, 300)})`);
    const events = assertConforming(run, req);
    check(run, events, turn);
    messages = [...structuredClone(run.agent.messages), { id: `user-${turn + 1}`, role: "user", content: `follow-up question ${turn}` }];
  }
}

describe("AG-UI endpoint with @ag-ui/client 1.0.0", { skip: !cmd && !inCI && "AGUI_SERVER_CMD is not set" }, () => {
  let srv;
  let url;
  let startError; // reported by every test, so a server that never came up counts as failures

  before(async () => {
    try {
      assert.ok(cmd, "AGUI_SERVER_CMD must be set when CI is set");
      srv = await startServer(cmd);
      url = srv.url;
    } catch (err) {
      startError = err;
    }
  });

  after(async () => {
    await srv?.stop();
  });

  function assertServerStarted() {
    if (startError) throw startError;
  }

  function assertServerHealthy() {
    assertHealthy(srv);
  }

  test("two sub-agents: the client accepts the stream and the tree is sound", { timeout: 60_000 }, async () => {
    assertServerStarted();
    const req = request();
    const run = await runClient(HttpAgent, { url, ...req });
    const events = assertConforming(run, req);
    const tree = assertTwoChildren(events);
    assertClientState(run.agent, tree);
    // Each child's usage and model reach the client in the metadata of its
    // SUBAGENT_FINISHED (AG-UI 1.0 has no usage field there).
    for (const [id, child] of tree) {
      const meta = child.terminals[0].metadata;
      assert.ok(meta?.usage?.length > 0 && meta.usage[0].inputTokens > 0, `SUBAGENT_FINISHED of "${id}" carries its usage: ${JSON.stringify(meta)}`);
      assert.equal(meta.model, "fake-small", `SUBAGENT_FINISHED of "${id}" names its model`);
    }
    assertServerHealthy();
  });

  test(`hidden lifecycle (header ${HIDE_HEADER}: ${HIDE_VALUE}): no SUBAGENT_*, attribution kept`, { timeout: 60_000 }, async () => {
    assertServerStarted();
    const headers = { [HIDE_HEADER]: HIDE_VALUE };
    const req = request();
    const run = await runClient(HttpAgent, { url, headers, ...req });
    const events = assertConforming(run, { ...req, lifecycle: false });
    const tree = assertTwoChildren(events, { lifecycle: false });
    assertClientState(run.agent, tree);

    // The mode exists for clients that predate sub-agents: the last one,
    // 0.0.58, must accept the same stream.
    const legacyReq = request();
    const legacy = await runClient(LegacyHttpAgent, { url, headers, ...legacyReq });
    assert.equal(legacy.events.at(-1)?.type, "RUN_FINISHED", "the 0.0.58 client saw the run finish");
    assert.ok(!legacy.events.some((e) => e.type.startsWith("SUBAGENT_")), "the 0.0.58 client saw no SUBAGENT_*");
    assertServerHealthy();
  });

  test("three turns of one conversation: the lead's model sees only the lead's own messages", { timeout: 90_000 }, async () => {
    assertServerStarted();
    await converse(url, 3, {
      forwardedProps: { scenario: "conversation" },
      check(run, events, turn) {
        assertTwoChildren(events);
        // The client keeps the children's messages and sends them back:
        // the server is what must leave them out.
        assert.ok(
          run.agent.messages.some((m) => m.subagentRunId !== undefined),
          `turn ${turn}: the client kept sub-agents' messages`,
        );
        // In this scenario the lead answers with the messages its model
        // received on its last call.
        const last = events.at(-1);
        assert.equal(typeof last.result, "string", "RUN_FINISHED.result is the lead's answer");
        const seen = JSON.parse(last.result);
        const want = [];
        for (let t = 1; t < turn; t++) want.push("user", "assistant:researcher,researcher", "tool", "tool", "assistant");
        want.push("user", "assistant:researcher,researcher", "tool", "tool");
        assert.deepEqual(
          seen.map((m) => (m.calls ? `${m.role}:${m.calls.join(",")}` : m.role)),
          want,
          `turn ${turn}: the roles and tool calls the lead's model received`,
        );
        const users = seen.filter((m) => m.role === "user").map((m) => m.content);
        const wantUsers = [USER_MESSAGE.content];
        for (let t = 1; t < turn; t++) wantUsers.push(`follow-up question ${t}`);
        assert.deepEqual(users, wantUsers, `turn ${turn}: the user messages the lead's model received`);
        // The server leaves tool results' text out of its answer, so a
        // child's words here come from a message the lead should not see.
        for (const m of seen) {
          assert.doesNotMatch(m.content ?? "", /Searching for|Findings on/, `turn ${turn}: a child's own message reached the lead as ${m.role}: ${m.content}`);
        }
        const ids = seen.filter((m) => m.role === "tool").map((m) => m.toolCallId);
        assert.equal(new Set(ids).size, ids.length, `turn ${turn}: tool call ids are unique across turns (${ids})`);
      },
    });
    assertServerHealthy();
  });

  test("a failing sub-agent ends in SUBAGENT_ERROR and the run still finishes", { timeout: 60_000 }, async () => {
    assertServerStarted();
    const req = request({ forwardedProps: { scenario: "child-error" } });
    const run = await runClient(HttpAgent, { url, ...req });
    const events = assertConforming(run, req);
    assertTwoChildren(events, { failed: 1 });
    assertServerHealthy();
  });

  test("a run the server stops ends with RUN_FINISHED outcome cancelled", { timeout: 60_000 }, async () => {
    assertServerStarted();
    // The client cannot ask for this: its own way to stop a run, abortRun,
    // closes the request, and nothing can answer it then. The scenario's
    // server stops the run itself (Handler.Stop), as an application would.
    const req = request({ forwardedProps: { scenario: "stopped" } });
    const run = await runClient(HttpAgent, { url, ...req });
    const events = assertConforming(run, req);
    const last = events.at(-1);
    assert.deepEqual(last.outcome, { type: "cancelled" }, "the stopped run's outcome");
    assert.equal(last.result, undefined, "a cancelled run has no result");
    assert.ok(Array.isArray(last.usage) && last.usage.length > 0, "it reports what it spent");
    for (const u of last.usage) {
      assert.ok(u.provider && u.model, `usage names its provider and model: ${JSON.stringify(u)}`);
    }
    assert.deepEqual(run.agent.pendingInterrupts ?? [], [], "nothing waits for an answer after a cancelled run");
    assertServerHealthy();
  });

  test("a client that disconnects mid-run does not hurt the server", { timeout: 90_000 }, async () => {
    assertServerStarted();
    const req = request({ forwardedProps: { scenario: "slow" } });
    let aborted = false;
    let outcome;
    try {
      const run = await runClient(HttpAgent, {
        url,
        ...req,
        onEvent(event, agent) {
          if (!aborted && event.type === "TEXT_MESSAGE_CONTENT" && event.subagentRunId !== undefined) {
            aborted = true;
            agent.abortRun();
          }
        },
      });
      outcome = run.events;
    } catch (err) {
      // The client may also surface the abort as an error; anything else is a failure.
      assert.match(String(err?.name ?? err), /Abort/, `the run failed with something other than the abort: ${err?.stack ?? err}`);
    }
    assert.ok(aborted, "the slow scenario reached a sub-agent's text before the run ended");
    if (outcome) {
      assert.ok(!outcome.some((e) => e.type === "RUN_FINISHED"), "the abort came before RUN_FINISHED");
    }
    // Give the server a moment to notice the disconnect, then prove it still serves.
    await new Promise((r) => setTimeout(r, 500));
    assertServerHealthy();
    const next = request();
    const run = await runClient(HttpAgent, { url, ...next });
    assertTwoChildren(assertConforming(run, next));
    assertServerHealthy();
  });
});

// The shipped example, examples/agui-server, through three turns of one
// conversation with the official client. AGUI_EXAMPLE_CMD names the command
// that starts it on a free port (CI: the built example with -addr 127.0.0.1:0).
const exampleCmd = process.env.AGUI_EXAMPLE_CMD;

describe("examples/agui-server with @ag-ui/client 1.0.0", { skip: !exampleCmd && !inCI && "AGUI_EXAMPLE_CMD is not set" }, () => {
  let srv;
  let startError;

  before(async () => {
    try {
      assert.ok(exampleCmd, "AGUI_EXAMPLE_CMD must be set when CI is set");
      srv = await startServer(exampleCmd);
    } catch (err) {
      startError = err;
    }
  });

  after(async () => {
    await srv?.stop();
  });

  test("three turns of one conversation all finish", { timeout: 90_000 }, async () => {
    if (startError) throw startError;
    await converse(srv.url, 3, {
      check(run, events, turn) {
        const started = events.filter((e) => e.type === "SUBAGENT_STARTED").map((e) => e.name);
        assert.deepEqual(started.sort(), ["expert", "researcher", "reviewer"], `turn ${turn}: the sub-agents that ran`);
        // The resident expert keeps its conversation across requests.
        const expertText = events
          .filter((e) => e.type === "TEXT_MESSAGE_CONTENT" && e.subagentRunId === events.find((s) => s.type === "SUBAGENT_STARTED" && s.name === "expert").subagentRunId)
          .map((e) => e.delta)
          .join("");
        assert.match(expertText, new RegExp(`question ${turn} I have been asked`), `turn ${turn}: the expert's count`);
      },
    });
    assertHealthy(srv);
  });
});
