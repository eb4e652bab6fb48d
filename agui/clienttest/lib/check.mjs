// Checks shared by the end-to-end test and the self-check.
//
// Three layers, from the wire up:
//   checkWire      every event against @ag-ui/core's own zod schemas, plus
//                  "no field the schema does not name" (the 1.0 client strips
//                  such fields with a warning instead of failing, which would
//                  hide an emitter bug);
//   checkSequence  ordering and attribution rules deputy promises on top of
//                  what the client verifies (see README.md, "Extra rules");
//   runClient      the real HttpAgent, whose own pipeline (enforcement,
//                  verifyEvents, reducer) must accept the stream.

import { EventSchemas } from "@ag-ui/core/schemas";

export const SUBAGENT_TYPES = new Set(["SUBAGENT_STARTED", "SUBAGENT_FINISHED", "SUBAGENT_ERROR"]);

// type -> the top-level keys its schema describes.
const KEYS_BY_TYPE = new Map(
  EventSchemas.options.map((option) => {
    const type = option.shape.type.def.values[0];
    return [type, new Set(Object.keys(option.shape))];
  }),
);

/**
 * Splits an SSE body into frames the way @ag-ui/client 1.0.0 does (frames end
 * at a blank line "\n\n"; only "data:" lines count, joined with "\n"; one
 * optional space after the colon is dropped), but reports what the client
 * would silently tolerate or choke on.
 */
export function parseSSE(text) {
  const problems = [];
  const events = [];
  if (text.includes("\r")) {
    problems.push('the body contains "\\r": the client splits frames on "\\n\\n" only, so CRLF framing never yields an event');
  }
  const frames = text.split("\n\n");
  const tail = frames.pop();
  if (tail.trim() !== "") problems.push(`the body ends inside a frame: ${JSON.stringify(tail.slice(0, 80))}`);
  frames.forEach((frame, i) => {
    const data = [];
    for (const line of frame.split("\n")) {
      if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    if (data.length === 0) return; // comments, event:, id:, retry: are ignored by the client
    let value;
    try {
      value = JSON.parse(data.join("\n"));
    } catch (err) {
      problems.push(`frame ${i}: data is not JSON (${err.message})`);
      return;
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      problems.push(`frame ${i}: data is not a JSON object`);
      return;
    }
    events.push(value);
  });
  return { events, problems };
}

/** Validates each event with EventSchemas and rejects fields the schema does not name. */
export function checkWire(events) {
  const problems = [];
  events.forEach((event, i) => {
    const where = `event ${i} (${event?.type})`;
    const parsed = EventSchemas.safeParse(event);
    if (!parsed.success) {
      for (const issue of parsed.error.issues) {
        problems.push(`${where}: ${issue.path.join(".") || "(event)"}: ${issue.message}`);
      }
      return;
    }
    const known = KEYS_BY_TYPE.get(event.type);
    for (const key of Object.keys(event)) {
      if (!known.has(key)) problems.push(`${where}: field "${key}" is not part of ${event.type}`);
    }
  });
  return problems;
}

/**
 * Checks ordering and attribution. With lifecycle false the stream must carry
 * no SUBAGENT_* events at all (the hidden mode) and the lifecycle rules are
 * skipped; attribution rules still apply.
 */
export function checkSequence(events, { lifecycle = true, resumes = [] } = {}) {
  const problems = [];
  const bad = (i, msg) => problems.push(`event ${i} (${events[i]?.type}): ${msg}`);

  const messages = new Map(); // messageId -> { owner, open }
  const toolCalls = new Map(); // toolCallId -> { owner, open, ended }
  const resultIds = new Set(); // TOOL_CALL_RESULT messageIds
  const openSteps = new Map(); // stepName -> owner
  const subagents = new Map(); // subagentRunId -> { open, parentToolCallId }
  const spawnedBy = new Map(); // toolCallId -> subagentRunId
  let runStarted = 0;
  let ended = false;
  // A resumed run does not announce again what the client has from the
  // run it resumes (resumes, that run's events): its results and
  // sub-agents may name the tool calls announced there.
  for (const e of resumes) {
    if (e.type === "TOOL_CALL_START") toolCalls.set(e.toolCallId, { owner: e.subagentRunId, open: false, ended: true });
  }

  const ownerName = (o) => (o === undefined ? "the parent agent" : `sub-agent "${o}"`);

  events.forEach((e, i) => {
    const owner = e.subagentRunId;
    if (i === 0 && e.type !== "RUN_STARTED") bad(i, "the first event must be RUN_STARTED");
    if (ended) bad(i, "event after the run ended");

    // Attribution must name a live sub-agent (the client deliberately does not check this).
    if (lifecycle && owner !== undefined && e.type !== "SUBAGENT_STARTED") {
      const s = subagents.get(owner);
      if (!s) bad(i, `attributed to sub-agent "${owner}", which was never started`);
      else if (!s.open) bad(i, `attributed to sub-agent "${owner}", which has already finished`);
    }
    if (!lifecycle && SUBAGENT_TYPES.has(e.type)) bad(i, "SUBAGENT_* events must be hidden in this mode");

    switch (e.type) {
      case "RUN_STARTED":
        runStarted++;
        if (runStarted > 1) bad(i, "a second RUN_STARTED in one response");
        break;
      case "RUN_FINISHED":
      case "RUN_ERROR": {
        ended = true;
        if (e.type === "RUN_ERROR") break; // RUN_ERROR may cut anything short
        for (const [id, m] of messages) if (m.open) bad(i, `text message "${id}" is still open`);
        for (const [id, t] of toolCalls) if (t.open) bad(i, `tool call "${id}" is still open`);
        for (const [name] of openSteps) bad(i, `step "${name}" is still open`);
        for (const [id, s] of subagents) if (s.open) bad(i, `sub-agent "${id}" is still open`);
        break;
      }

      case "TEXT_MESSAGE_START":
        if (messages.has(e.messageId) || resultIds.has(e.messageId) || toolCalls.has(e.messageId)) {
          bad(i, `messageId "${e.messageId}" is reused`);
        }
        messages.set(e.messageId, { owner, open: true });
        break;
      case "TEXT_MESSAGE_CONTENT":
      case "TEXT_MESSAGE_END": {
        const m = messages.get(e.messageId);
        if (!m || !m.open) {
          bad(i, `text message "${e.messageId}" is not open`);
          break;
        }
        if (m.owner !== owner) bad(i, `attributed to ${ownerName(owner)} but message "${e.messageId}" belongs to ${ownerName(m.owner)}`);
        if (e.type === "TEXT_MESSAGE_CONTENT" && e.delta === "") bad(i, "empty delta");
        if (e.type === "TEXT_MESSAGE_END") m.open = false;
        break;
      }

      case "TOOL_CALL_START":
        if (toolCalls.has(e.toolCallId)) bad(i, `toolCallId "${e.toolCallId}" is reused`);
        if (e.parentMessageId !== undefined) {
          const m = messages.get(e.parentMessageId);
          if (!m) bad(i, `parentMessageId "${e.parentMessageId}" names no earlier text message`);
          else if (m.owner !== owner) bad(i, `tool call of ${ownerName(owner)} inside a message of ${ownerName(m.owner)}`);
        }
        toolCalls.set(e.toolCallId, { owner, open: true, ended: false });
        break;
      case "TOOL_CALL_ARGS":
      case "TOOL_CALL_END": {
        const t = toolCalls.get(e.toolCallId);
        if (!t || !t.open) {
          bad(i, `tool call "${e.toolCallId}" is not open`);
          break;
        }
        if (t.owner !== owner) bad(i, `attributed to ${ownerName(owner)} but tool call "${e.toolCallId}" belongs to ${ownerName(t.owner)}`);
        if (e.type === "TOOL_CALL_ARGS" && e.delta === "") bad(i, "empty delta");
        if (e.type === "TOOL_CALL_END") {
          t.open = false;
          t.ended = true;
        }
        break;
      }
      case "TOOL_CALL_RESULT": {
        const t = toolCalls.get(e.toolCallId);
        if (!t || !t.ended) bad(i, `result for tool call "${e.toolCallId}", which has not ended`);
        else if (t.owner !== owner) bad(i, `result attributed to ${ownerName(owner)} for a tool call of ${ownerName(t.owner)}`);
        if (messages.has(e.messageId) || resultIds.has(e.messageId) || toolCalls.has(e.messageId)) {
          bad(i, `messageId "${e.messageId}" is reused`);
        }
        resultIds.add(e.messageId);
        const child = spawnedBy.get(e.toolCallId);
        if (child !== undefined && subagents.get(child)?.open) {
          bad(i, `result for tool call "${e.toolCallId}" while its sub-agent "${child}" is still open`);
        }
        break;
      }

      case "STEP_STARTED":
        // Unique across ALL owners: clients up to 0.0.58 (the ones the hidden
        // mode exists for) key open steps by name alone.
        if (openSteps.has(e.stepName)) bad(i, `step "${e.stepName}" is already open (step names must be unique among open steps, whoever owns them)`);
        openSteps.set(e.stepName, owner);
        break;
      case "STEP_FINISHED":
        if (!openSteps.has(e.stepName)) bad(i, `step "${e.stepName}" is not open`);
        else if (openSteps.get(e.stepName) !== owner) bad(i, `step "${e.stepName}" finished by ${ownerName(owner)}, started by ${ownerName(openSteps.get(e.stepName))}`);
        openSteps.delete(e.stepName);
        break;

      case "SUBAGENT_STARTED": {
        const id = e.subagentRunId;
        if (subagents.has(id)) bad(i, `subagentRunId "${id}" is reused`);
        const parent = e.parentSubagentRunId;
        if (parent !== undefined && !subagents.get(parent)?.open) bad(i, `parentSubagentRunId "${parent}" is not an open sub-agent`);
        const t = toolCalls.get(e.parentToolCallId);
        if (e.parentToolCallId === undefined) bad(i, "no parentToolCallId");
        else if (!t) bad(i, `parentToolCallId "${e.parentToolCallId}" names no earlier TOOL_CALL_START`);
        else {
          if (t.owner !== parent) bad(i, `parentToolCallId "${e.parentToolCallId}" belongs to ${ownerName(t.owner)}, not to the spawning ${ownerName(parent)}`);
          if (spawnedBy.has(e.parentToolCallId)) bad(i, `tool call "${e.parentToolCallId}" already spawned sub-agent "${spawnedBy.get(e.parentToolCallId)}"`);
          spawnedBy.set(e.parentToolCallId, id);
        }
        subagents.set(id, { open: true, parentToolCallId: e.parentToolCallId });
        break;
      }
      case "SUBAGENT_FINISHED":
      case "SUBAGENT_ERROR": {
        const s = subagents.get(e.subagentRunId);
        if (s) s.open = false; // the "not open" case was reported above
        break;
      }
    }
  });
  if (!ended) problems.push("the stream ended without RUN_FINISHED or RUN_ERROR");
  return problems;
}

/** Groups a stream by sub-agent: id -> { started, terminals, text, texts }. */
export function children(events) {
  const out = new Map();
  const get = (id) => {
    if (!out.has(id)) out.set(id, { started: undefined, terminals: [], text: "", contentEvents: 0 });
    return out.get(id);
  };
  for (const e of events) {
    if (e.type === "SUBAGENT_STARTED") get(e.subagentRunId).started = e;
    else if (e.type === "SUBAGENT_FINISHED" || e.type === "SUBAGENT_ERROR") get(e.subagentRunId).terminals.push(e);
    else if (e.type === "TEXT_MESSAGE_CONTENT" && e.subagentRunId !== undefined) {
      const c = get(e.subagentRunId);
      c.text += e.delta;
      c.contentEvents++;
    }
  }
  return out;
}

/** Encodes events as the SSE body a conforming server sends. */
export function encodeSSE(events) {
  return events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("");
}

/**
 * Runs one request through an HttpAgent class (the 1.0.0 one, or the legacy
 * one) and returns what the client delivered, the raw body it read, and the
 * warnings the client printed. Rejects when the client rejects the run.
 *
 * fetchImpl replaces the network (the self-check uses it to feed a fixture).
 */
export async function runClient(HttpAgent, { url, threadId, runId, messages, forwardedProps, headers, fetchImpl, onEvent, abortController }) {
  const raw = { status: undefined, contentType: undefined, text: undefined };
  const baseFetch = fetchImpl ?? ((u, init) => fetch(u, init));
  const teeFetch = async (u, init) => {
    raw.request = { url: u, method: init.method, headers: init.headers, body: JSON.parse(init.body) };
    const res = await baseFetch(u, init);
    raw.status = res.status;
    raw.contentType = res.headers.get("content-type");
    if (!res.body) return res;
    const [a, b] = res.body.tee();
    raw.text = new Response(b).text().catch(() => undefined);
    return new Response(a, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
  const agent = new HttpAgent({ url: url ?? "http://127.0.0.1/unused", threadId, initialMessages: messages, headers, fetch: teeFetch });
  const events = [];
  const warnings = [];
  const saved = { warn: console.warn, error: console.error };
  console.warn = (...args) => warnings.push(args.map(String).join(" "));
  console.error = (...args) => warnings.push(args.map(String).join(" "));
  try {
    const result = await agent.runAgent(
      { runId, forwardedProps, abortController },
      {
        onEvent({ event }) {
          events.push(event);
          onEvent?.(event, agent);
        },
      },
    );
    return { result, events, warnings, raw: { ...raw, text: await raw.text }, agent };
  } finally {
    console.warn = saved.warn;
    console.error = saved.error;
  }
}
