// The official TypeScript MCP client against deputy's MCP server, over
// stdio and over streamable HTTP. MCP_SERVER_CMD is the path of the built
// mcpbridge/internal/testserver (see README.md).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const serverCmd = process.env.MCP_SERVER_CMD;
if (!serverCmd) {
  test('deputy over MCP', { skip: 'set MCP_SERVER_CMD to the built mcpbridge/internal/testserver (see README.md)' }, () => {});
}

// startHTTP runs the server with -http and resolves with the process and
// the endpoint URL it prints first.
function startHTTP() {
  return new Promise((resolve, reject) => {
    const proc = spawn(serverCmd, ['-http'], { stdio: ['ignore', 'pipe', 'inherit'] });
    proc.on('error', reject);
    const lines = createInterface({ input: proc.stdout });
    lines.once('line', (url) => resolve({ proc, url: new URL(url) }));
    setTimeout(() => reject(new Error('the test server printed no URL within 10 s')), 10000).unref();
  });
}

const transports = {
  stdio: async () => ({ transport: new StdioClientTransport({ command: serverCmd, stderr: 'inherit' }), stop: () => {} }),
  'streamable HTTP': async () => {
    const { proc, url } = await startHTTP();
    return { transport: new StreamableHTTPClientTransport(url), stop: () => proc.kill('SIGTERM') };
  },
};

async function eventually(what, fn) {
  const deadline = Date.now() + 10000;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const textOf = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('');

for (const [name, make] of serverCmd ? Object.entries(transports) : []) {
  describe(`deputy over ${name}`, () => {
    let client, stop;
    before(async () => {
      const t = await make();
      stop = t.stop;
      client = new Client({ name: 'deputy-clienttest', version: '1.0.0' });
      await client.connect(t.transport);
    });
    after(async () => {
      await client?.close();
      stop?.();
    });

    test('lists the served sub-agents with their schemas', async () => {
      const { tools } = await client.listTools();
      const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
      assert.deepEqual(Object.keys(byName).sort(), ['cancellations', 'researcher', 'reviewer', 'slow']);
      assert.equal(byName.reviewer.inputSchema.type, 'object');
      assert.ok(byName.reviewer.inputSchema.properties.task, 'the reviewer takes a task');
      assert.deepEqual(byName.reviewer.outputSchema.required, ['status', 'summary']);
      assert.equal(byName.researcher.outputSchema, undefined);
    });

    test('calls a validated sub-agent and gets structured content', async () => {
      const res = await client.callTool({ name: 'reviewer', arguments: { task: 'review the patch' } });
      assert.equal(res.isError, undefined);
      assert.equal(res.structuredContent.status, 'success');
      assert.equal(res.structuredContent.summary, 'the change is sound');
      assert.deepEqual(res.structuredContent.findings, { issues: 0 });
      assert.equal(JSON.parse(textOf(res)).status, 'success');
    });

    test('receives progress while a sub-agent works', async () => {
      const seen = [];
      const res = await client.callTool({ name: 'researcher', arguments: { task: 'find the answer' } }, undefined, {
        onprogress: (p) => seen.push(p),
      });
      assert.equal(textOf(res), 'The answer is 42.');
      const messages = seen.map((p) => p.message);
      assert.ok(messages.includes('sub-agent researcher started'), `progress: ${JSON.stringify(messages)}`);
      assert.ok(messages.includes('calling lookup'), `progress: ${JSON.stringify(messages)}`);
      for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress, 'progress increases');
    });

    test('receives every progress notification of every call before its result', async () => {
      for (let call = 0; call < 5; call++) {
        const seen = [];
        await client.callTool({ name: 'researcher', arguments: { task: 'find the answer' } }, undefined, {
          onprogress: (p) => seen.push(p.message),
        });
        const shape = seen.map((m) => m.replace(/^step .*/, 'step'));
        assert.deepEqual(shape, ['sub-agent researcher started', 'step', 'calling lookup', 'step', 'sub-agent finished'], `call ${call}: ${JSON.stringify(seen)}`);
      }
    });

    test('a tool error is an error result', async () => {
      const res = await client.callTool({ name: 'researcher', arguments: { task: 7 } });
      assert.equal(res.isError, true);
      assert.match(textOf(res), /invalid arguments/);
    });

    test('cancelling a long call cancels the child', async () => {
      const ctl = new AbortController();
      const started = Date.now();
      const call = client.callTool({ name: 'slow', arguments: { task: 'forever' } }, undefined, { signal: ctl.signal });
      setTimeout(() => ctl.abort('the user gave up'), 300);
      await assert.rejects(call);
      assert.ok(Date.now() - started < 5000, 'the cancelled call ended promptly');
      await eventually('the child saw its cancellation', async () => {
        const res = await client.callTool({ name: 'cancellations', arguments: {} });
        return textOf(res) === '1';
      });
    });
  });
}
