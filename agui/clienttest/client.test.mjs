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

describe("AG-UI endpoint with @ag-ui/client 1.0.0", { skip: !cmd && !inCI && "AGUI_SERVER_CMD is not set" }, () => {
  let server;
  let url;
  let exited; // set when the server process ends
  let stderr = "";
  let startError; // reported by every test, so a server that never came up counts as failures

  before(async () => {
    try {
      await start();
    } catch (err) {
      startError = err;
    }
  });

  async function start() {
    assert.ok(cmd, "AGUI_SERVER_CMD must be set when CI is set");
    server = spawn(cmd, {
      shell: true,
      cwd: process.env.AGUI_SERVER_CWD ?? moduleRoot(here),
      detached: true, // own process group, so "go run" and the binary it built stop together
      stdio: ["ignore", "pipe", "pipe"],
    });
    server.on("exit", (code, signal) => {
      exited = { code, signal };
    });
    server.stderr.setEncoding("utf8");
    server.stderr.on("data", (s) => {
      stderr = (stderr + s).slice(-64 * 1024);
    });
    url = await new Promise((resolve, reject) => {
      let out = "";
      const timer = setTimeout(() => reject(new Error(`no URL on the server's stdout within ${STARTUP_TIMEOUT_MS} ms\nstderr:\n${stderr}`)), STARTUP_TIMEOUT_MS);
      server.stdout.setEncoding("utf8");
      server.stdout.on("data", (s) => {
        if (out.includes("\n")) return; // keep draining, so the server never blocks on a full pipe
        out += s;
        const nl = out.indexOf("\n");
        if (nl >= 0) {
          clearTimeout(timer);
          resolve(out.slice(0, nl).trim());
        }
      });
      server.on("exit", (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`the server exited (code ${code}, signal ${signal}) before printing its URL\nstderr:\n${stderr}`));
      });
    });
    const parsed = new URL(url);
    assert.equal(parsed.hostname, "127.0.0.1", `the server listens on 127.0.0.1 (printed ${url})`);
  }

  after(async () => {
    if (!server || exited) return;
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
  });

  function assertServerStarted() {
    if (startError) throw startError;
  }

  function assertServerHealthy() {
    assert.equal(exited, undefined, `the server is still running\nstderr:\n${stderr}`);
    assert.doesNotMatch(stderr, /\bpanic:|DATA RACE/, "the server reported no panic or race");
  }

  test("two sub-agents: the client accepts the stream and the tree is sound", { timeout: 60_000 }, async () => {
    assertServerStarted();
    const req = request();
    const run = await runClient(HttpAgent, { url, ...req });
    const events = assertConforming(run, req);
    const tree = assertTwoChildren(events);
    assertClientState(run.agent, tree);
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

  test("a failing sub-agent ends in SUBAGENT_ERROR and the run still finishes", { timeout: 60_000 }, async () => {
    assertServerStarted();
    const req = request({ forwardedProps: { scenario: "child-error" } });
    const run = await runClient(HttpAgent, { url, ...req });
    const events = assertConforming(run, req);
    assertTwoChildren(events, { failed: 1 });
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
