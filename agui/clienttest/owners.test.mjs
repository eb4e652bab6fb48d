// Threads with owners, with the official client, against the server named
// by AGUI_SERVER_CMD at its /agui-owned endpoint: the approval tree served
// WithAuthorize, the user being the bearer token, the first user of a
// threadId claiming it. Alice's run waits for her approval; Bob, knowing
// her threadId, continues it, answers her interrupt and reads her thread,
// and each time gets the application's 404 and nothing of the thread;
// alice then approves and her run succeeds, its tool run once. Skipped
// without AGUI_SERVER_CMD, except under CI, where it fails.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, describe, test } from "node:test";
import { HttpAgent } from "@ag-ui/client";

const cmd = process.env.AGUI_SERVER_CMD;
const inCI = Boolean(process.env.CI) && process.env.CI !== "false";
const here = dirname(fileURLToPath(import.meta.url));
const root = process.env.AGUI_SERVER_CWD ?? join(here, "..", "..");
let server;

function start() {
  const p = spawn(cmd, { shell: true, cwd: root, detached: true, stdio: ["ignore", "pipe", "inherit"] });
  server = p;
  return new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error("no URL within 60 s")), 60_000);
    p.stdout.setEncoding("utf8");
    p.stdout.on("data", (s) => {
      out += s;
      const m = out.match(/https?:\/\/\S+/);
      if (m && out.includes("\n")) {
        clearTimeout(timer);
        resolve(m[0].replace(/\/agui$/, "/agui-owned"));
      }
    });
  });
}

after(() => {
  if (server) {
    try {
      process.kill(-server.pid, "SIGTERM");
    } catch {}
  }
});

const as = (user) => (user ? { Authorization: `Bearer ${user}` } : {});

async function run(url, user, threadId, params, messages = [{ id: "u1", role: "user", content: "tidy up" }]) {
  const agent = new HttpAgent({ url, threadId, headers: as(user), initialMessages: messages });
  const events = [];
  await agent.runAgent(params, { onEvent: ({ event }) => events.push(event) });
  return { agent, last: events.at(-1) };
}

describe("threads with owners, with @ag-ui/client", { skip: !cmd && !inCI && "set AGUI_SERVER_CMD (see README.md)" }, () => {
  test("a stranger who knows the threadId is refused, and learns nothing", async () => {
    assert.ok(cmd, "AGUI_SERVER_CMD must be set in CI");
    const url = await start();
    const threadId = `alice-${process.pid}`;
    const first = await run(url, "alice", threadId, { runId: "r1" });
    assert.equal(first.last.outcome?.type, "interrupt");
    const it = first.last.outcome.interrupts[0];

    const attempts = [
      () => run(url, "bob", threadId, { runId: "b1" }),
      () => run(url, "bob", threadId, { runId: "b2", resume: [{ interruptId: it.id, status: "resolved", payload: { approved: true } }] }, []),
    ];
    for (const attempt of attempts) {
      await assert.rejects(attempt, (err) => {
        assert.equal(err.status, 404);
        assert.deepEqual(err.payload, { message: "no such conversation" });
        assert.ok(!JSON.stringify(err.payload).includes(it.id));
        return true;
      });
    }
    await assert.rejects(() => run(url, "", threadId, { runId: "anon" }), (err) => err.status === 401);
    for (const [method, path] of [["GET", ""], ["DELETE", ""], ["POST", "/stop"]]) {
      const res = await fetch(`${url}/threads/${encodeURIComponent(threadId)}${path}`, { method, headers: as("bob") });
      assert.equal(res.status, 404, `bob's ${method} ${path}`);
      assert.deepEqual(await res.json(), { message: "no such conversation" });
    }
    const bobs = await (await fetch(`${url}/threads/`, { headers: as("bob") })).json();
    assert.deepEqual(bobs, { threads: [] });

    const mine = await (await fetch(`${url}/threads/${encodeURIComponent(threadId)}`, { headers: as("alice") })).json();
    assert.equal(mine.interrupts[0].id, it.id, "alice reads her pending interrupt");
    const resumed = await run(url, "alice", threadId, { runId: "r2", resume: [{ interruptId: it.id, status: "resolved", payload: { approved: true } }] }, first.agent.messages);
    assert.ok(!resumed.last.outcome || resumed.last.outcome.type === "success", JSON.stringify(resumed.last));
    assert.match(String(resumed.last.result), /lead finished/);
    const listed = await (await fetch(`${url}/threads/`, { headers: as("alice") })).json();
    assert.deepEqual(listed, { threads: [threadId] });
  });
});
