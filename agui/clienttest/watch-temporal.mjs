// Not a test of its own: the temporal module's TestOfficialClientWatchesATreeOnTemporal
// runs it, as `node watch-temporal.mjs URL`, against the AG-UI handler
// serving a tree on Temporal that asks a person. The official client runs
// the thread, answers the question it ends with (approving every one), and
// runs the thread again with the answers; each run's events must pass the
// client's own schemas and deputy's sequence rules. It prints what the Go
// test checks, as one line of JSON, and exits 1 on a broken rule.
import { HttpAgent } from "@ag-ui/client";
import { checkSequence, checkWire } from "./lib/check.mjs";

const url = process.argv[2];
const threadId = `temporal-${process.pid}`;
const problems = [];

async function run(agent, params, resumes = []) {
  const events = [];
  await agent.runAgent(params, { onEvent: ({ event }) => events.push(event) });
  problems.push(...checkWire(events), ...checkSequence(events, { resumes }));
  return events;
}

const a1 = new HttpAgent({ url, threadId, initialMessages: [{ id: "u1", role: "user", content: "pay" }] });
const first = await run(a1, { runId: `${threadId}-1` });
const end1 = first.at(-1);
const asked = end1.outcome?.type === "interrupt" ? end1.outcome.interrupts : [];
const a2 = new HttpAgent({ url, threadId, initialMessages: a1.messages });
const resume = asked.map((it) => ({ interruptId: it.id, status: "resolved", payload: { approved: true } }));
const second = await run(a2, { runId: `${threadId}-2`, resume }, first);
const end2 = second.at(-1);
const started = (events) => events.filter((e) => e.type === "SUBAGENT_STARTED").map((e) => e.name);
console.log(JSON.stringify({
  problems,
  asked: asked.map((it) => ({ reason: it.reason, subagentRunId: it.subagentRunId ?? "" })),
  firstStarted: started(first),
  secondEnd: end2.type,
  result: end2.result,
}));
process.exit(problems.length ? 1 : 0);
