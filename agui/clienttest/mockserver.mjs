// A reference implementation of the scenario contract in README.md, built from
// fixtures/two-children.json. It is not what CI tests: CI starts the Go test
// server. It lets the harness itself be exercised end to end
// (npm run test:mock) and shows the Go side what is expected.
//
// Prints its endpoint URL as the first line of stdout, like the Go server must.

import http from "node:http";
import { readFileSync } from "node:fs";
import { RunAgentInputSchema } from "@ag-ui/core/schemas";

const fixture = JSON.parse(readFileSync(new URL("./fixtures/two-children.json", import.meta.url), "utf8"));

function scenarioEvents(scenario, input) {
  const events = structuredClone(fixture).map((e) => {
    if (e.type === "RUN_STARTED" || e.type === "RUN_FINISHED") {
      e.threadId = input.threadId;
      e.runId = input.runId;
    }
    e.timestamp = Date.now();
    return e;
  });
  if (scenario !== "child-error") return events;
  return events.map((e) => {
    if (e.type === "SUBAGENT_FINISHED" && e.subagentRunId === "sub-b") {
      return { type: "SUBAGENT_ERROR", timestamp: e.timestamp, subagentRunId: "sub-b", message: "researcher failed: the source timed out", code: "subagent_failed" };
    }
    if (e.type === "TOOL_CALL_RESULT" && e.toolCallId === "call-b") {
      return { ...e, content: "error: researcher failed: the source timed out" };
    }
    return e;
  });
}

const SCENARIOS = new Set(["two-children", "child-error", "slow"]);

const server = http.createServer(async (req, res) => {
  if (req.method !== "POST" || req.url !== "/agui") {
    res.writeHead(404).end();
    return;
  }
  let body = "";
  for await (const chunk of req) body += chunk;
  let input;
  try {
    input = RunAgentInputSchema.parse(JSON.parse(body));
  } catch (err) {
    res.writeHead(400, { "content-type": "application/json" }).end(JSON.stringify({ error: String(err.message ?? err) }));
    return;
  }
  const scenario = input.forwardedProps?.scenario ?? "two-children";
  if (!SCENARIOS.has(scenario)) {
    res.writeHead(400, { "content-type": "application/json" }).end(JSON.stringify({ error: `unknown scenario ${scenario}` }));
    return;
  }
  const hide = String(req.headers["deputy-subagent-events"] ?? "").toLowerCase() === "hide";
  let events = scenarioEvents(scenario, input);
  if (hide) events = events.filter((e) => !e.type.startsWith("SUBAGENT_"));

  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  let gone = false;
  res.on("close", () => {
    gone = true;
  });
  let slow = false;
  for (const e of events) {
    if (gone) break;
    if (e.type === "SUBAGENT_STARTED" || (hide && e.subagentRunId !== undefined)) slow = scenario === "slow";
    if (slow) await new Promise((r) => setTimeout(r, 250));
    if (gone) break;
    res.write(`data: ${JSON.stringify(e)}\n\n`);
  }
  res.end();
});

server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`http://127.0.0.1:${server.address().port}/agui\n`);
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => process.exit(0));
