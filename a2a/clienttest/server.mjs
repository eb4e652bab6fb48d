// A2A agents written with the official JavaScript SDK's server API
// (@a2a-js/sdk: an AgentExecutor behind DefaultRequestHandler and the
// SDK's Express transports), for the Go test a2a/reference_test.go, which
// delegates to them through a2a.Connect. README.md describes them.
//
// It listens on 127.0.0.1, prints its base URL as the first line of its
// output, and serves until SIGTERM or SIGINT:
//
//   <base>/answerer    (JSON-RPC)  answers at once, in two streamed pieces
//   <base>/asker       (JSON-RPC)  asks which account pays (input-required),
//   <base>/asker-rest  (HTTP+JSON)   then pays from the account it is told
//   <base>/received    {"messages":[…],"payments":n}: every message the
//                      agents received, in order, and the payments made
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import express from 'express';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, restHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { Message, Task, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent } from '@a2a-js/sdk';

// received is what the executors were sent: the ids the message carried
// on the wire, the task and context the SDK ran it under, and its text;
// payments counts the askers' payments.
const received = [];
let payments = 0;

// wire keeps, by messageId, the ids each message carried as it arrived:
// the SDK fills in a message's missing ids before its executor sees it.
const wire = new Map();
function noteIds(req, _res, next) {
  const m = req.body?.params?.message ?? req.body?.message;
  if (typeof m?.messageId === 'string') {
    wire.set(m.messageId, { taskId: m.taskId ?? m.task_id ?? '', contextId: m.contextId ?? m.context_id ?? '' });
  }
  next();
}

const textOf = (m) => (m?.parts ?? []).filter((p) => p.content?.$case === 'text').map((p) => p.content.value).join('\n');

function record(agent, ctx) {
  const m = ctx.userMessage;
  const ids = wire.get(m.messageId);
  wire.delete(m.messageId);
  received.push({
    agent,
    onWire: ids !== undefined,
    messageTaskId: ids?.taskId,
    messageContextId: ids?.contextId,
    taskId: ctx.taskId,
    contextId: ctx.contextId,
    text: textOf(m),
  });
}

const agentText = (ctx, text) =>
  Message.fromJSON({ messageId: randomUUID(), role: 'ROLE_AGENT', taskId: ctx.taskId, contextId: ctx.contextId, parts: [{ text }] });

// task is the event every execution starts with: the task as it stands,
// or a new one holding the user's message.
const task = (ctx) =>
  AgentEvent.task(
    ctx.task ??
      Task.fromJSON({
        id: ctx.taskId,
        contextId: ctx.contextId,
        status: { state: 'TASK_STATE_SUBMITTED' },
        history: [Message.toJSON(ctx.userMessage)],
      }),
  );

const status = (ctx, state, message) =>
  AgentEvent.statusUpdate(
    TaskStatusUpdateEvent.fromJSON({
      taskId: ctx.taskId,
      contextId: ctx.contextId,
      status: { state, message: message && Message.toJSON(message), timestamp: new Date().toISOString() },
    }),
  );

const artifact = (ctx, text, append, lastChunk) =>
  AgentEvent.artifactUpdate(
    TaskArtifactUpdateEvent.fromJSON({
      taskId: ctx.taskId,
      contextId: ctx.contextId,
      artifact: { artifactId: 'reply', name: 'reply', parts: [{ text }] },
      append,
      lastChunk,
    }),
  );

const cancelTask = async (taskId, bus) => {
  bus.publish(
    AgentEvent.statusUpdate(
      TaskStatusUpdateEvent.fromJSON({ taskId, status: { state: 'TASK_STATE_CANCELED', timestamp: new Date().toISOString() } }),
    ),
  );
  bus.finished();
};

// answerer replies "JS answerer: <the message>" in two pieces.
const answerer = {
  async execute(ctx, bus) {
    record('answerer', ctx);
    bus.publish(task(ctx));
    bus.publish(status(ctx, 'TASK_STATE_WORKING'));
    bus.publish(artifact(ctx, 'JS answerer: ', false, false));
    bus.publish(artifact(ctx, textOf(ctx.userMessage), true, true));
    bus.publish(status(ctx, 'TASK_STATE_COMPLETED'));
    bus.finished();
  },
  cancelTask,
};

// asker asks, on a new task, which account should pay; a message on that
// task answers, and the task completes with "paid from <the answer>".
const asker = (name) => ({
  async execute(ctx, bus) {
    record(name, ctx);
    bus.publish(task(ctx));
    const waiting = ctx.task?.status?.state === TaskState.TASK_STATE_INPUT_REQUIRED;
    if (!waiting) {
      bus.publish(status(ctx, 'TASK_STATE_INPUT_REQUIRED', agentText(ctx, 'Which account should pay?')));
    } else {
      const account = textOf(ctx.userMessage).trim();
      payments++;
      bus.publish(status(ctx, 'TASK_STATE_WORKING'));
      bus.publish(artifact(ctx, `paid from ${account}`, false, true));
      bus.publish(status(ctx, 'TASK_STATE_COMPLETED'));
    }
    bus.finished();
  },
  cancelTask,
});

const app = express();
const server = createServer(app);
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const base = `http://127.0.0.1:${server.address().port}`;

function mount(path, name, description, executor, binding) {
  const card = {
    name,
    description,
    version: '1.0.0',
    supportedInterfaces: [{ url: base + path, protocolBinding: binding, protocolVersion: '1.0' }],
    capabilities: { streaming: true, pushNotifications: false },
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [{ id: name, name, description, tags: ['test'] }],
  };
  const requestHandler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
  app.use(`${path}/.well-known/agent-card.json`, agentCardHandler({ agentCardProvider: requestHandler }));
  const transport = binding === 'JSONRPC' ? jsonRpcHandler : restHandler;
  const json = express.json({ type: ['application/json', 'application/a2a+json'], strict: false });
  app.use(path, json, noteIds, transport({ requestHandler, userBuilder: UserBuilder.noAuthentication }));
}

app.get('/received', (_req, res) => res.json({ messages: received, payments }));
mount('/answerer', 'js_answerer', 'Answers at once.', answerer, 'JSONRPC');
mount('/asker', 'js_asker', 'Asks which account pays, then pays.', asker('asker'), 'JSONRPC');
mount('/asker-rest', 'js_asker', 'Asks which account pays, then pays.', asker('asker-rest'), 'HTTP+JSON');

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
}
console.log(base);
