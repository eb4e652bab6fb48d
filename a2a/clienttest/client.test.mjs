// The official A2A JavaScript client (@a2a-js/sdk) against deputy's A2A
// server, over JSON-RPC and over HTTP+JSON.
//
// A2A_SERVER_CMD is a shell command that starts a2a/internal/testserver
// (built, or with "go run") and prints the agent's base URL as the first
// line of its stdout. It runs in the a2a module's root (the nearest
// directory above this one holding go.mod). Without it these tests are
// skipped, except under CI, where a missing server is a failure. README.md
// says what the server does.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Message, TaskState, taskStateToJSON } from '@a2a-js/sdk';
import { ClientFactory, ClientFactoryOptions } from '@a2a-js/sdk/client';

const here = dirname(fileURLToPath(import.meta.url));
const cmd = process.env.A2A_SERVER_CMD;
const inCI = Boolean(process.env.CI) && process.env.CI !== 'false';
const STARTUP_TIMEOUT_MS = 120_000; // "go run" compiles first

if (!cmd) {
  test('deputy over A2A', { skip: !inCI && 'set A2A_SERVER_CMD to start a2a/internal/testserver (see README.md)' }, () => {
    assert.fail('A2A_SERVER_CMD is not set');
  });
}

function moduleRoot(dir) {
  for (let d = dir; ; d = dirname(d)) {
    if (existsSync(join(d, 'go.mod'))) return d;
    if (dirname(d) === d) return dir;
  }
}

// startServer runs the command in its own process group and resolves with
// the base URL it prints first and a stop function that ends the group.
function startServer(command) {
  return new Promise((resolve, reject) => {
    const proc = spawn(command, {
      shell: true,
      cwd: moduleRoot(here),
      detached: true, // "go run" and the binary it built stop together
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    proc.stderr.on('data', (b) => {
      stderr += b;
      process.stderr.write(b);
    });
    const exited = new Promise((r) => proc.once('exit', r));
    const stop = async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return stderr;
      try {
        process.kill(-proc.pid, 'SIGTERM');
      } catch {
        return stderr;
      }
      const timer = setTimeout(() => {
        try {
          process.kill(-proc.pid, 'SIGKILL');
        } catch {}
      }, 5000);
      await exited;
      clearTimeout(timer);
      return stderr;
    };
    const timer = setTimeout(() => {
      stop();
      reject(new Error(`the test server printed no URL within ${STARTUP_TIMEOUT_MS / 1000} s`));
    }, STARTUP_TIMEOUT_MS);
    proc.on('error', reject);
    proc.once('exit', (code) => reject(new Error(`the test server exited (${code}) before printing its URL:\n${stderr}`)));
    const lines = createInterface({ input: proc.stdout });
    lines.once('line', (line) => {
      clearTimeout(timer);
      proc.stdout.resume(); // whatever follows is read and dropped
      resolve({ url: line.trim(), stop });
    });
  });
}

const userMessage = (text, task) =>
  Message.fromJSON({ messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }], ...task });
const answerTo = (task, parts) =>
  Message.fromJSON({ messageId: randomUUID(), role: 'ROLE_USER', taskId: task.id ?? task.taskId, contextId: task.contextId, parts });

const stateName = (s) => taskStateToJSON(s);
const textOf = (parts = []) => parts.filter((p) => p.content?.$case === 'text').map((p) => p.content.value).join('');
const dataOf = (parts = []) => parts.filter((p) => p.content?.$case === 'data').map((p) => p.content.value);
const answerText = (task) => textOf(task.artifacts.find((a) => a.artifactId === 'answer')?.parts);

function assertState(got, want, what) {
  assert.equal(stateName(got.status?.state), stateName(want), `${what}: ${JSON.stringify(got.status)}`);
}

// collect sends m as a stream and returns its events, unwrapped.
async function collect(client, m, onEvent = async () => {}) {
  const events = [];
  for await (const ev of client.sendMessageStream({ message: m })) {
    events.push(ev.payload);
    await onEvent(ev.payload);
  }
  return events;
}

const lastStatus = (events) => events.filter((e) => e.$case === 'statusUpdate').at(-1)?.value;

async function eventually(what, fn) {
  const deadline = Date.now() + 5000;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const bindings = [
  { name: 'JSON-RPC', binding: 'JSONRPC', path: '' },
  { name: 'HTTP+JSON', binding: 'HTTP+JSON', path: '/rest' },
];

describe('deputy over A2A', { skip: !cmd }, () => {
  let server;
  before(async () => {
    server = await startServer(cmd);
  });
  after(async () => {
    const stderr = await server?.stop();
    assert.doesNotMatch(stderr ?? '', /panic:|DATA RACE/, 'the test server panicked or raced');
  });

  const stats = async () => (await fetch(`${server.url}/stats`)).json();

  for (const { name, binding, path } of bindings) {
    describe(`over ${name}`, () => {
      let client;
      before(async () => {
        const factory = new ClientFactory(
          ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { preferredTransports: [binding] }),
        );
        client = await factory.createFromUrl(server.url);
      });

      test('resolves the agent card', async () => {
        const card = await client.getAgentCard();
        assert.equal(card.name, 'clerk');
        assert.equal(card.version, '1.0.0');
        assert.equal(card.capabilities.streaming, true);
        assert.deepEqual(card.skills.map((s) => s.id).sort(), ['transfer', 'wait']);
        const iface = card.supportedInterfaces.find((i) => i.protocolBinding === binding);
        assert.equal(iface?.url, server.url + path);
        assert.equal(iface.protocolVersion, '1.0');
        // The client speaks A2A 1.0 to the card's interface: no v0.3 layer.
        assert.equal(client.protocolVersion, '1.0');
      });

      test('sends a message and gets the completed task with its usage', async () => {
        const task = await client.sendMessage({ message: userMessage('hello there') });
        assertState(task, TaskState.TASK_STATE_COMPLETED, 'the task');
        assert.equal(answerText(task), 'You said: hello there');
        assert.deepEqual(task.metadata['deputy/usage'], { requests: 1, inputTokens: 10, outputTokens: 2, totalTokens: 12 });
        assert.equal(textOf(task.history[0].parts), 'hello there');
      });

      test('streams a message, a word at a time, then gets the task', async () => {
        const events = await collect(client, userMessage('stream these words'));
        assert.equal(events[0].$case, 'task', 'the stream starts with the task');
        const task = events[0].value;
        assertState(task, TaskState.TASK_STATE_SUBMITTED, 'the first event');
        const chunks = events.filter((e) => e.$case === 'artifactUpdate').map((e) => e.value);
        assert.ok(chunks.length >= 3, `${chunks.length} artifact updates, want the answer in pieces`);
        for (const c of chunks) assert.equal(c.taskId, task.id);
        // The pieces stream with append; the last one, the whole answer, replaces them.
        const last = chunks.at(-1);
        assert.equal(last.lastChunk, true);
        assert.equal(textOf(last.artifact.parts), 'You said: stream these words');
        const streamed = chunks.slice(0, -1).map((c) => textOf(c.artifact.parts));
        assert.equal(streamed.join(''), 'You said: stream these words');
        assert.ok(chunks.slice(1, -1).every((c) => c.append), 'the pieces after the first are appended');
        const done = lastStatus(events);
        assertState(done, TaskState.TASK_STATE_COMPLETED, 'the last status');
        assert.equal(done.metadata['deputy/usage'].requests, 1);

        const got = await client.getTask({ id: task.id });
        assertState(got, TaskState.TASK_STATE_COMPLETED, 'getTask');
        assert.equal(got.contextId, task.contextId);
        assert.equal(answerText(got), 'You said: stream these words');
        assert.equal(got.metadata['deputy/usage'].totalTokens, 12);
      });

      test('cancels a running task, which ends canceled', async () => {
        const before = (await stats()).cancellations;
        let id;
        let cancelled;
        const started = Date.now();
        const events = await collect(client, userMessage('wait'), async (e) => {
          if (e.$case === 'task') id = e.value.id;
          // Cancelled once the wait tool runs: deputy reports its call.
          if (!cancelled && e.$case === 'statusUpdate' && e.value.metadata?.['deputy/event']?.type === 'TOOL_CALL_START') {
            assert.equal(e.value.metadata['deputy/event'].toolCallName, 'wait');
            cancelled = await client.cancelTask({ id });
          }
        });
        assert.ok(cancelled, 'the wait tool was never reported running');
        assert.ok(Date.now() - started < 5000, 'the cancelled task ended promptly');
        assertState(cancelled, TaskState.TASK_STATE_CANCELED, 'cancelTask');
        assertState(lastStatus(events), TaskState.TASK_STATE_CANCELED, 'the stream');
        const got = await client.getTask({ id });
        assertState(got, TaskState.TASK_STATE_CANCELED, 'getTask');
        await eventually('the wait tool saw its cancellation', async () => (await stats()).cancellations === before + 1);
      });

      test('input required, then "yes" on the same task completes it', async () => {
        const before = await stats();
        const asked = await client.sendMessage({ message: userMessage('pay 100') });
        assertState(asked, TaskState.TASK_STATE_INPUT_REQUIRED, 'the first message');
        const q = asked.status.message;
        assert.match(textOf(q.parts), /Allow transfer with \{"amount":100\}\? Answer yes or no\./);
        const [data] = dataOf(q.parts);
        assert.equal(data.interrupts.length, 1);
        assert.equal(data.interrupts[0].reason, 'tool_approval');
        assert.deepEqual(asked.metadata['deputy/interrupts'].map((i) => i.id), [data.interrupts[0].id]);
        assert.equal((await stats()).transfers, before.transfers, 'the transfer waits for its approval');

        const done = await client.sendMessage({ message: answerTo(asked, [{ text: 'yes' }]) });
        assert.equal(done.id, asked.id, 'the answer continues the same task');
        assert.equal(done.contextId, asked.contextId);
        assertState(done, TaskState.TASK_STATE_COMPLETED, 'the answered task');
        assert.equal(answerText(done), 'done: moved 100');
        // The resumed run makes one model call more and reports the whole
        // task: both calls, each counted once, of which the first was paid
        // before the question and is said so under earlier.
        assert.deepEqual(done.metadata['deputy/usage'], {
          requests: 2, inputTokens: 20, outputTokens: 4, totalTokens: 24,
          earlier: { requests: 1, inputTokens: 10, outputTokens: 2, totalTokens: 12 },
        });
        const after = await stats();
        assert.equal(after.transfers, before.transfers + 1);
        assert.equal(after.modelCalls, before.modelCalls + 2);
      });

      test('input required over a stream, answered with data, completes rejected', async () => {
        const before = await stats();
        const asked = lastStatus(await collect(client, userMessage('pay 7')));
        assertState(asked, TaskState.TASK_STATE_INPUT_REQUIRED, 'the first stream');
        const events = await collect(client, answerTo(asked, [{ data: { approved: false } }]));
        const done = lastStatus(events);
        assert.equal(done.taskId, asked.taskId, 'the answer continues the same task');
        assertState(done, TaskState.TASK_STATE_COMPLETED, 'the answered task');
        const answer = events.filter((e) => e.$case === 'artifactUpdate').at(-1).value.artifact;
        assert.match(textOf(answer.parts), /^done: .*did not approve the call transfer/);
        assert.equal((await stats()).transfers, before.transfers, 'a rejected transfer does not run');
      });
    });
  }
});
