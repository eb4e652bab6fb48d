// The run-tree viewer: it starts runs through the server's AG-UI endpoint
// (POST run), reads their events as they stream, and draws the tree of
// sub-agents they describe. Every event changes the model at once; the page
// is redrawn at most once a frame, so it keeps up with a wide fan-out.
"use strict";

const $ = (id) => document.getElementById(id);
const ROOT = "";

// newID returns a fresh id for a run or a message.
function newID(prefix) {
  return prefix + Math.random().toString(36).slice(2, 10) + Date.now().toString(36);
}

// A Tree is the delegation tree of one thread's run, and of the runs that
// resume it: a node per sub-agent invocation, keyed by its subagentRunId,
// under the lead's node (ROOT).
class Tree {
  constructor(threadId, title) {
    this.threadId = threadId;
    this.nodes = new Map();
    this.toolNode = new Map(); // toolCallId → the node whose call it is
    this.dirty = new Set();
    this.interrupts = [];
    this.answers = new Map();
    this.el = document.createElement("div");
    this.el.className = "run";
    const h = document.createElement("h3");
    h.textContent = title;
    // The tree, and beside it its timeline.
    this.treeEl = document.createElement("div");
    this.treeEl.className = "tree";
    this.timeline = newTimeline(this);
    this.el.append(h, this.treeEl, this.timeline.el);
    // A node or group folded or opened in the tree is in the timeline so.
    this.el.addEventListener("toggle", () => this.retime(), true);
    this.root = this.add(ROOT, "lead", null);
    $("runs").prepend(this.el);
  }

  // retime redraws the tree's timeline in the next frame.
  retime() {
    this.timeline.dirty = true;
    schedule();
  }

  // add makes the node id under parent (null: the tree's top).
  add(id, name, parent) {
    const n = {
      tree: this,
      id, name, status: "running", started: 0, finished: 0, usage: [], model: "",
      text: "", tools: new Map(), result: "", error: "", kids: [], stepNow: 0,
      order: Infinity, task: "", lastMsg: "", queuedAt: 0, queuedMs: 0, waitAt: 0, waitMs: 0,
      groups: new Map(), group: null, allTools: false,
      // Each time queued for admission and each wait for a person, as
      // [from, to] (to 0 while it lasts), for the timeline.
      queues: [], waits: [],
      // What the node's own model calls spent since it last reported its
      // usage (one deputy.usage event each), and what each child had
      // spent by then (counted in that report).
      live: zeroSpent(), counted: new Map(),
    };
    const el = document.createElement("details");
    el.className = "node";
    el.open = true;
    el.innerHTML = '<summary><span class="name"></span><span class="task"></span><span class="badge"></span><span class="meta"></span><span class="bar" aria-hidden="true"><i></i></span></summary>' +
      '<div class="questions"></div><pre class="text"></pre><ul class="tools"></ul><p class="job" hidden></p><ol class="mailbox" aria-label="Messages sent to it" hidden></ol>' +
      '<p class="note" hidden></p><p class="error" hidden></p><div class="children"></div>';
    el.querySelector(".name").textContent = name;
    el.deputyNode = n;
    n.el = el;
    n.parent = parent;
    if (parent) place(parent, n); else this.treeEl.append(el);
    if (parent) parent.kids.push(n);
    this.nodes.set(id, n);
    this.touch(n);
    return n;
  }

  node(id) { return this.nodes.get(id || ROOT) || this.root; }

  touch(n) {
    this.dirty.add(n);
    this.timeline.dirty = true;
    schedule();
  }

  // touchUp touches n and the nodes above it, whose spending so far
  // includes n's.
  touchUp(n) {
    for (let p = n; p; p = p.parent) this.touch(p);
  }

  // apply changes the tree by one AG-UI event.
  apply(e) {
    if (!marked.has("deputy:first-event")) mark("deputy:first-event");
    const at = e.timestamp || Date.now();
    const n = this.node(e.subagentRunId);
    switch (e.type) {
      case "RUN_STARTED":
        if (!this.root.started) this.root.started = at;
        if (this.root.waitAt) {
          this.root.waitMs += at - this.root.waitAt; // resumed with the answers
          closeLast(this.root.waits, at);
        }
        this.root.waitAt = 0;
        this.root.status = "running";
        this.root.finished = 0;
        this.touch(this.root);
        break;
      case "STEP_STARTED":
        n.stepNow = stepOf(e.stepName);
        break;
      case "TEXT_MESSAGE_CONTENT":
        // A new message is a new turn: kept apart from the one before.
        if (e.messageId !== n.lastMsg && n.text) n.text += "\n\n";
        n.lastMsg = e.messageId;
        n.text += e.delta;
        this.touch(n);
        break;
      case "TOOL_CALL_START":
        // A reply with no text names no message: its calls are the step's.
        n.tools.set(e.toolCallId, { name: e.toolCallName, args: "", result: null, step: stepOf(e.parentMessageId) || n.stepNow, index: n.tools.size });
        this.toolNode.set(e.toolCallId, n);
        this.touch(n);
        break;
      case "TOOL_CALL_ARGS": {
        const t = n.tools.get(e.toolCallId);
        if (t) t.args += e.delta;
        this.touch(n);
        break;
      }
      case "TOOL_CALL_RESULT": {
        const owner = this.toolNode.get(e.toolCallId) || n;
        const t = owner.tools.get(e.toolCallId);
        if (t) t.result = e.content;
        this.touch(owner);
        break;
      }
      case "SUBAGENT_STARTED": {
        let c = this.nodes.get(e.subagentRunId);
        if (!c) c = this.add(e.subagentRunId, e.name, e.parentSubagentRunId ? this.node(e.parentSubagentRunId) : this.root);
        c.call = e.parentToolCallId || "";
        // The call that started it, as it stands now: a model may give the
        // same id to calls of later steps.
        const made = (c.parent || this.root).tools.get(c.call);
        // A job of an earlier turn, announced again to a later one, keeps
        // what its call said when this view saw it.
        if (made || !c.args) {
          c.step = made ? made.step : 0;
          c.args = made ? made.args : "";
          c.task = taskOf(c.args);
        }
        spent(c, e.metadata); // the model a spawn chose from its menu
        if (made && c.order === Infinity) {
          c.order = made.step * 1e6 + made.index;
          place(c.parent, c); // in call order among its siblings
        }
        if (c.status === "suspended" && c.waitAt) {
          c.waitMs += at - c.waitAt;
          closeLast(c.waits, at);
        }
        c.waitAt = 0;
        c.status = "running";
        c.started = c.started || at;
        c.finished = 0;
        this.touch(c);
        break;
      }
      case "SUBAGENT_FINISHED": {
        const c = this.node(e.subagentRunId);
        spent(c, e.metadata);
        if (e.outcome && e.outcome.type === "suspended") {
          c.status = "suspended";
          c.waitAt = at;
          c.waits.push([at, 0]);
        } else {
          c.result = typeof e.result === "string" ? e.result : JSON.stringify(e.result ?? "");
          c.status = partial(c.result) ? "partial" : "success";
          c.finished = at;
        }
        this.touchUp(c);
        break;
      }
      case "SUBAGENT_ERROR": {
        const c = this.node(e.subagentRunId);
        spent(c, e.metadata);
        c.status = e.code === "cancelled" ? "cancelled" : "failed";
        c.error = e.message;
        c.finished = at;
        this.touchUp(c);
        break;
      }
      case "CUSTOM":
        if (e.name === "deputy.admission" && e.value) {
          if (e.value.state === "queued" && n.status === "running") {
            n.status = "queued";
            n.queuedAt = at;
            n.queues.push([at, 0]);
          }
          if (e.value.state === "admitted" && n.status === "queued") {
            n.status = "running";
            if (n.queuedAt) n.queuedMs += at - n.queuedAt;
            n.queuedAt = 0;
            closeLast(n.queues, at);
          }
          this.touch(n);
        }
        if (e.name.startsWith("deputy.job_") && e.value && typeof e.value.subagent_run_id === "string") {
          const c = this.nodes.get(e.value.subagent_run_id);
          if (c) {
            job(c, e.name.slice("deputy.job_".length), e.value);
            this.touch(c);
          }
        }
        if (e.name === "deputy.usage" && e.value && Array.isArray(e.value.usage)) {
          // One model call of n ended: its spending climbs, and its
          // parents' with it.
          addSpent(n.live, e.value.usage);
          if (!n.model) n.model = e.value.usage.map((u) => u.model).find(Boolean) || "";
          this.touchUp(n);
        }
        break;
      case "RUN_FINISHED": {
        const r = this.root;
        if (e.usage) reported(r, e.usage);
        r.model = [...new Set(r.usage.map((u) => u.model).filter(Boolean))].join(", ") || r.model;
        const kind = e.outcome && e.outcome.type;
        if (kind === "interrupt") {
          r.status = "suspended";
          r.waitAt = at;
          r.waits.push([at, 0]);
          this.ask(e.outcome.interrupts || []);
        } else {
          r.status = kind === "cancelled" ? "cancelled" : "success";
          r.result = typeof e.result === "string" ? e.result : "";
          r.finished = at;
        }
        this.touch(r);
        break;
      }
      case "RUN_ERROR":
        this.root.status = "failed";
        this.root.error = e.message;
        this.root.finished = at;
        this.touch(this.root);
        break;
    }
  }

  // ask shows each question where it was asked, with a form for its answer.
  ask(interrupts) {
    this.interrupts = interrupts;
    this.answers = new Map();
    for (const it of interrupts) {
      const n = this.node(it.subagentRunId);
      let shown = null;
      if (this.rerun) {
        // A re-run is not a run of the thread: nothing waits for the
        // answer. It shows where the re-run would ask again.
        shown = document.createElement("p");
        shown.className = "asked-again";
        shown.textContent = `The re-run stops here, asking again: ${it.message || it.reason}`;
      }
      n.el.querySelector(":scope > .questions").append(shown || questionForm(this, it));
      n.el.open = true;
      for (let p = n.parent; p; p = p.parent) p.el.open = true;
    }
  }

  // answer keeps one answer; once every question has one, the run resumes.
  answer(id, status, payload) {
    this.answers.set(id, { interruptId: id, status, payload });
    if (this.answers.size < this.interrupts.length) {
      say(`${this.answers.size} of ${this.interrupts.length} questions answered.`);
      return;
    }
    const resume = [...this.answers.values()];
    const at = Date.now();
    this.answered(resume.map((a) => ({ ...a, at })));
    stream(this, { threadId: this.threadId, runId: newID("run_"), messages: [], resume });
  }

  // answered draws each question the tree still asks as answered, with
  // its record — the answer, who gave it (when the server knows) and when
  // — or, for a question whose answer was not recorded, as answered all
  // the same: the run that went on was resumed with it.
  answered(records) {
    const byID = new Map(records.map((a) => [a.interruptId, a]));
    for (const f of this.el.querySelectorAll("form.question[data-interrupt-id]")) {
      const done = document.createElement("div");
      done.className = "answered";
      done.dataset.interruptId = f.dataset.interruptId;
      const q = document.createElement("p");
      q.textContent = f.querySelector("p").textContent;
      const a = document.createElement("p");
      a.className = "answer";
      a.textContent = answerText(byID.get(f.dataset.interruptId));
      done.append(q, a);
      f.replaceWith(done);
    }
    this.interrupts = [];
    this.answers = new Map();
  }
}

// Wide fan-outs: more children of one name than GROUP_AT under one parent
// are drawn as a group, folded, with a line that counts them by status; a
// node lists its first TOOLS_SHOWN calls, and the rest on request.
const GROUP_AT = 10;
const TOOLS_SHOWN = 20;

// A background job: its sub-agent's node holds the job (its id and state)
// and its mailbox, a message per seq with its text, state and the step it
// was delivered before, from the job's events (deputy.job_*).
function job(n, what, v) {
  if (!n.job) n.job = { id: v.job_id, state: "running", cancelled: false, mail: new Map() };
  const j = n.job;
  const receipt = (r) => {
    const m = j.mail.get(r.seq) || { text: "", state: "queued", step: 0 };
    if (typeof v.text === "string" && r === v) m.text = v.text;
    // A receipt never goes back from delivered to queued.
    if (m.state !== "delivered") {
      m.state = r.state;
      m.step = r.step || 0;
    }
    j.mail.set(r.seq, m);
  };
  switch (what) {
    case "message":
    case "delivered":
      if (typeof v.seq === "number") receipt(v);
      break;
    case "cancelled":
      j.cancelled = true;
      break;
    case "started":
    case "status":
    case "ended":
      if (typeof v.state === "string") j.state = v.state;
      for (const r of Array.isArray(v.messages) ? v.messages : []) if (typeof r.seq === "number") receipt(r);
      break;
  }
}

// drawJob draws n's job line and its mailbox.
function drawJob(n) {
  const line = n.el.querySelector(":scope > .job");
  const box = n.el.querySelector(":scope > .mailbox");
  line.hidden = !n.job;
  box.hidden = !n.job || n.job.mail.size === 0;
  if (!n.job) return;
  const j = n.job;
  line.textContent = `background job ${j.id} · ${j.state}` + (j.cancelled && j.state === "running" ? " · cancel asked" : "");
  const items = [...j.mail.entries()].sort((a, b) => a[0] - b[0]).map(([seq, m]) => {
    const li = document.createElement("li");
    li.value = seq;
    li.dataset.state = m.state;
    const text = document.createElement("span");
    text.className = "message";
    text.textContent = clip(m.text, 300) || "(message)";
    const receipt = document.createElement("span");
    receipt.className = "receipt";
    receipt.textContent = m.state === "delivered" ? `delivered before step ${m.step}` : m.state;
    li.append(text, " ", receipt);
    return li;
  });
  box.replaceChildren(...items);
}

// taskOf reads the task from a call's arguments, or "".
function taskOf(args) {
  try {
    const v = JSON.parse(args);
    return v && typeof v.task === "string" ? v.task : "";
  } catch {
    return "";
  }
}

// place puts n's element among its siblings under parent, in the order of
// the calls that started them, in its name's group once there is one.
function place(parent, n) {
  let g = parent.groups.get(n.name);
  if (!g) {
    const same = parent.kids.filter((k) => k.name === n.name && k !== n);
    if (same.length + 1 > GROUP_AT) {
      g = newGroup(parent, n.name);
      for (const k of same) {
        k.group = g;
        g.kids.push(k);
        insertOrdered(g.body, k.el, k.order);
      }
    }
  }
  n.el.deputyOrder = n.order;
  if (!g) {
    insertOrdered(parent.el.querySelector(":scope > .children"), n.el, n.order);
    return;
  }
  if (n.group !== g) {
    n.group = g;
    g.kids.push(n);
  }
  if (g.sort === "call") insertOrdered(g.body, n.el, n.order);
  else g.body.append(n.el);
  const first = Math.min(...g.kids.map((k) => k.order));
  if (first !== g.el.deputyOrder) {
    g.el.deputyOrder = first;
    insertOrdered(parent.el.querySelector(":scope > .children"), g.el, first);
  }
  dirtyGroups.add(g);
}

// insertOrdered puts el in container before the first element of a later
// call.
function insertOrdered(container, el, order) {
  let before = null;
  for (const c of container.children) {
    if (c !== el && c.deputyOrder > order) {
      before = c;
      break;
    }
  }
  if (before) container.insertBefore(el, before);
  else if (el.parentNode !== container || el.nextSibling) container.append(el);
}

// newGroup makes the folded group of parent's children named name.
function newGroup(parent, name) {
  const g = { name, kids: [], sort: "call", parent };
  g.el = document.createElement("details");
  g.el.className = "group";
  g.el.deputyGroup = g;
  g.el.deputyOrder = Infinity;
  const summary = document.createElement("summary");
  g.line = document.createElement("span");
  g.line.className = "group-line";
  summary.append(g.line);
  const sortID = newID("sort_");
  const label = document.createElement("label");
  label.htmlFor = sortID;
  label.textContent = "Sort by";
  const select = document.createElement("select");
  select.id = sortID;
  for (const [v, text] of [["call", "call order"], ["time", "wall time"], ["cost", "cost"], ["state", "state"]]) select.append(new Option(text, v));
  select.addEventListener("change", () => sortGroup(g, select.value));
  g.body = document.createElement("div");
  g.body.className = "children";
  const tools = document.createElement("div");
  tools.className = "group-tools";
  tools.append(label, " ", select);
  g.el.append(summary, tools, g.body);
  parent.groups.set(name, g);
  parent.el.querySelector(":scope > .children").append(g.el);
  return g;
}

const STATES = ["failed", "cancelled", "suspended", "partial", "queued", "running", "success"];

// sortGroup orders a group's children by call, wall time (longest first),
// cost (dearest first) or state (failures first).
function sortGroup(g, by) {
  g.sort = by;
  const key = {
    call: (n) => n.order,
    time: (n) => -wallOf(n),
    cost: (n) => -soFar(n).cost,
    state: (n) => STATES.indexOf(n.status) * 1e12 + n.order,
  }[by];
  const kids = [...g.kids].sort((a, b) => key(a) - key(b));
  g.body.append(...kids.map((k) => k.el));
  g.parent.tree.retime();
}

// drawGroup writes a group's line: "worker ×1000: 998 success, 2 failed".
function drawGroup(g) {
  const counts = new Map();
  for (const k of g.kids) counts.set(k.status, (counts.get(k.status) || 0) + 1);
  const byState = STATES.filter((s) => counts.has(s)).sort((a, b) => counts.get(b) - counts.get(a)).map((s) => `${counts.get(s)} ${s}`);
  g.line.textContent = `${g.name} ×${g.kids.length}: ${byState.join(", ")}`;
  g.el.dataset.failed = counts.has("failed") ? "yes" : "";
}

// answerText says how a question was answered: what, by whom, when.
function answerText(a) {
  if (!a) return "Answered (the answer was not recorded).";
  const p = a.payload;
  let verb = "Answered";
  if (a.status === "cancelled") verb = "Declined";
  else if (p && typeof p === "object" && typeof p.approved === "boolean") verb = p.approved ? "Approved" : "Refused";
  let text = verb;
  if (a.by) text += ` by ${a.by}`;
  if (a.at) text += ` at ${new Date(a.at).toISOString().slice(0, 19).replace("T", " ")} UTC`;
  if (a.status !== "cancelled" && p !== undefined) text += `: ${JSON.stringify(p)}`;
  return text;
}

// stepOf reads the step of a message id such as "run_x/step-3": 3, or 0.
function stepOf(messageId) {
  const m = /\/step-(\d+)$/.exec(messageId || "");
  return m ? Number(m[1]) : 0;
}

// spent takes a sub-agent's usage and model from an event's metadata.
function spent(n, meta) {
  if (!meta) return;
  if (meta.usage) reported(n, meta.usage);
  if (meta.model) n.model = meta.model;
}

// reported takes the usage n reports (its own calls' and its children's,
// the whole turn's): what its calls and children had spent so far is in
// it.
function reported(n, usage) {
  n.usage = usage;
  n.live = zeroSpent();
  n.counted = new Map(n.kids.map((k) => [k, soFar(k)]));
}

// closeLast ends the last of intervals, if it is open, at at.
function closeLast(intervals, at) {
  const last = intervals[intervals.length - 1];
  if (last && !last[1]) last[1] = at;
}

// partial reports whether a result says its child did not finish: a report
// of status partial, or the note of a child that reached its budget.
function partial(result) {
  if (result.includes("reached its token budget")) return true;
  try {
    const v = JSON.parse(result);
    return v && v.status === "partial";
  } catch {
    return false;
  }
}

// questionForm builds the form that answers one interrupt, from its
// response schema: a field per property (a checkbox for a boolean, a
// choice for an enum, a number or text box otherwise).
function questionForm(tree, it) {
  const f = document.createElement("form");
  f.className = "question";
  f.dataset.interruptId = it.id;
  const q = document.createElement("p");
  q.textContent = it.message || it.reason || "The run asks for an answer.";
  f.append(q);
  const schema = it.responseSchema || {};
  const props = schema.properties || {};
  // An approval is answered with a button: Approve, or Decline.
  const approval = it.reason === "tool_approval" && (!props.approved || props.approved.type === "boolean");
  const fields = [];
  for (const [name, s] of Object.entries(props)) {
    if (approval && name === "approved") continue;
    const id = newID("f_");
    const label = document.createElement("label");
    label.htmlFor = id;
    label.textContent = name + ((schema.required || []).includes(name) ? " (required)" : "");
    let input;
    if (Array.isArray(s.enum)) {
      input = document.createElement("select");
      for (const v of s.enum) input.append(new Option(String(v), JSON.stringify(v)));
    } else {
      input = document.createElement("input");
      input.type = s.type === "boolean" ? "checkbox" : s.type === "number" || s.type === "integer" ? "number" : "text";
    }
    input.id = id;
    input.name = name;
    fields.push({ name, s, input });
    if (input.type === "checkbox") label.prepend(input); else label.append(document.createElement("br"), input);
    f.append(label);
  }
  const send = document.createElement("button");
  send.type = "submit";
  send.className = approval ? "approve" : "send";
  send.textContent = approval ? "Approve" : "Send answer";
  const decline = document.createElement("button");
  decline.type = "button";
  decline.className = "decline";
  decline.textContent = "Decline";
  f.append(send, " ", decline);
  f.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const payload = approval ? { approved: true } : {};
    for (const { name, s, input } of fields) {
      if (input.type === "checkbox") payload[name] = input.checked;
      else if (input.tagName === "SELECT") payload[name] = JSON.parse(input.value);
      else if (input.value !== "") payload[name] = s.type === "number" || s.type === "integer" ? Number(input.value) : input.value;
    }
    f.querySelectorAll("button").forEach((b) => (b.disabled = true));
    tree.answer(it.id, "resolved", payload);
  });
  decline.addEventListener("click", () => {
    f.querySelectorAll("button").forEach((b) => (b.disabled = true));
    if (approval) tree.answer(it.id, "resolved", { approved: false });
    else tree.answer(it.id, "cancelled", undefined);
  });
  return f;
}

// Drawing: the nodes changed since the last frame are redrawn in the next.
let scheduled = false;
const trees = [];
const dirtyGroups = new Set();

function schedule() {
  if (scheduled) return;
  scheduled = true;
  requestAnimationFrame(draw);
}

function draw() {
  scheduled = false;
  let drawn = 0;
  for (const t of trees) {
    for (const n of t.dirty) drawNode(n);
    drawn += t.dirty.size;
    t.dirty.clear();
  }
  for (const g of dirtyGroups) drawGroup(g);
  dirtyGroups.clear();
  if ($("filter").value || $("search").value) refilter();
  for (const t of trees) if (t.timeline.dirty) drawTimeline(t);
  if (drawn && marked.has("deputy:first-event") && !marked.has("deputy:first-node")) mark("deputy:first-node");
  if (finishedRuns > drawnRuns) {
    drawnRuns = finishedRuns;
    // The runs' spans are final: every bar of the waterfall is redrawn
    // to scale once.
    for (const t of trees) {
      for (const n of t.nodes.values()) drawBar(n);
      drawTimeline(t);
    }
    mark("deputy:tree-drawn"); // every event of the finished runs is on the page
  }
}

// Performance marks, for a page that measures the viewer (the browser
// tests): the first event applied, the first node drawn after it, and each
// run's tree drawn whole once its stream ended.
const marked = new Set();
let finishedRuns = 0, drawnRuns = 0;

function mark(name) {
  marked.add(name);
  performance.mark(name);
}

function drawNode(n) {
  if (rerunOn && !n.rerun && n.call && rerunnable(n) && done(n.status) && !n.tree.rerun) addRerun(n);
  n.el.dataset.status = n.status;
  n.el.querySelector(":scope > summary .badge").textContent = n.status;
  n.el.querySelector(":scope > summary .meta").textContent = meta(n);
  n.el.querySelector(":scope > summary .task").textContent = n.task ? clip(n.task, 120) : "";
  drawBar(n);
  if (n.group) dirtyGroups.add(n.group);
  n.el.querySelector(":scope > .text").textContent = n.text.length > 20000 ? "…" + n.text.slice(-20000) : n.text;
  const tools = n.el.querySelector(":scope > .tools");
  const calls = [...n.tools.values()];
  const shown = n.allTools ? calls : calls.slice(0, TOOLS_SHOWN);
  const items = shown.map((t) => {
    const li = document.createElement("li");
    const code = document.createElement("code");
    code.textContent = `${t.name}(${clip(t.args, 300)})` + (t.result === null ? " …" : ` → ${clip(t.result, 300)}`);
    li.append(code);
    return li;
  });
  if (shown.length < calls.length) {
    const li = document.createElement("li");
    li.className = "more";
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = `Show the other ${calls.length - shown.length} calls`;
    b.addEventListener("click", () => {
      n.allTools = true;
      n.tree.touch(n);
    });
    li.append(b);
    items.push(li);
  }
  tools.replaceChildren(...items);
  drawJob(n);
  const noteAt = n.result.indexOf("[validation failed:");
  const note = n.el.querySelector(":scope > .note");
  note.hidden = noteAt < 0;
  note.textContent = noteAt < 0 ? "" : n.result.slice(noteAt);
  const err = n.el.querySelector(":scope > .error");
  err.hidden = !n.error;
  err.textContent = n.error;
}

function done(status) {
  return status === "success" || status === "partial" || status === "failed";
}

// Re-running: a finished sub-agent of the lead, or of one of the lead's
// sub-agents, can be re-run with its task edited (the server's WithRerun);
// the others' answers are kept, and the sub-agents above it go on from
// their calls.
let rerunOn = false;

function rerunnable(n) {
  const p = n.parent;
  return p && (p.parent === null || (p.parent && p.parent.parent === null && p.call));
}

function addRerun(n) {
  const tree = trees.find((t) => t.nodes.get(n.id) === n);
  if (!tree) return;
  n.rerun = true;
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = "Re-run from here";
  b.setAttribute("aria-label", `Re-run ${n.name} from here`);
  b.className = "rerun";
  b.addEventListener("click", () => {
    b.hidden = true;
    n.el.querySelector(":scope > .questions").append(rerunForm(tree, n, () => (b.hidden = false)));
  });
  n.el.querySelector(":scope > .questions").before(b);
}

// rerunForm edits a sub-agent's task, taken from the lead's call, and
// re-runs the turn from it.
function rerunForm(tree, n, cancel) {
  const f = document.createElement("form");
  f.className = "question rerun-form";
  const id = newID("task_");
  const label = document.createElement("label");
  label.htmlFor = id;
  label.textContent = `The task for ${n.name}`;
  const task = document.createElement("textarea");
  task.id = id;
  task.name = "task";
  task.rows = 3;
  try {
    task.value = JSON.parse(n.args).task || "";
  } catch {
    task.value = "";
  }
  const send = document.createElement("button");
  send.type = "submit";
  send.textContent = "Re-run with this task";
  const back = document.createElement("button");
  back.type = "button";
  back.textContent = "Cancel";
  f.append(label, task, send, " ", back);
  back.addEventListener("click", () => {
    f.remove();
    cancel();
  });
  f.addEventListener("submit", (ev) => {
    ev.preventDefault();
    f.remove();
    cancel();
    const fork = new Tree(tree.threadId, `re-run of ${n.name} in thread ${tree.threadId}`);
    fork.rerun = true;
    trees.push(fork);
    const req = { threadId: tree.threadId, runId: newID("run_"), fromRunId: tree.runId, step: n.step, toolCallId: n.call, task: task.value };
    if (n.parent.parent !== null) {
      // A call of one of the lead's sub-agents: named by that sub-agent,
      // and the lead's step that called it.
      req.subagentRunId = n.parent.id;
      req.parentStep = n.parent.step;
    }
    stream(fork, req, "rerun");
  });
  return f;
}

// meta is a node's one line of figures: wall time, tokens, cached share,
// cost, what the prompt cache saved and model.
function meta(n) {
  const { input, output, cached, cost, saved, before } = soFar(n);
  const parts = [];
  if (n.started) {
    // Wall time leaves out the time spent waiting for a person, which is
    // shown apart, as is the time queued for the provider's admission.
    parts.push(`${sec(wallOf(n))} s`);
    const queued = n.queuedMs + (n.queuedAt ? Date.now() - n.queuedAt : 0);
    if (queued >= 10) parts.push(`${sec(queued)} s queued`);
    const waited = waitOf(n);
    if (waited >= 10) parts.push(`${sec(waited)} s waiting for a person`);
  }
  // Until the node reports its usage, what its calls and its children's
  // have spent climbs as each call ends.
  if (input || output) parts.push(`${input} in, ${output} out` + (busy(n) ? " so far" : ""));
  if (before) parts.push(`${before} of them before the resume`);
  if (cached) parts.push(`${Math.round((100 * cached) / input)}% cached`);
  if (cost) parts.push(`$${cost.toFixed(6)}`);
  // What the cache saved, at the same prices: negative when cache writes
  // cost more than reads saved.
  if (saved > 0) parts.push(`$${saved.toFixed(6)} saved by the cache`);
  else if (saved < 0) parts.push(`$${(-saved).toFixed(6)} more for cache writes`);
  if (n.model) parts.push(n.model);
  return " " + parts.join(" · ");
}

// spentOf sums a node's usage entries. A resumed turn reports the whole
// turn; "earlier" is the part of each entry its runs before the resume
// spent.
function spentOf(n) {
  return addSpent(zeroSpent(), n.usage || []);
}

function zeroSpent() {
  return { input: 0, output: 0, cached: 0, cost: 0, saved: 0, before: 0 };
}

// addSpent adds usage entries (AG-UI's TokenUsage, with deputy's costUsd
// and cacheSavedUsd) to s.
function addSpent(s, usage) {
  for (const u of usage) {
    s.input += u.inputTokens || 0;
    s.output += u.outputTokens || 0;
    s.cached += u.cachedInputTokens || 0;
    s.cost += u.costUsd || 0;
    s.saved += u.cacheSavedUsd || 0;
    if (u.earlier) s.before += (u.earlier.inputTokens || 0) + (u.earlier.outputTokens || 0);
  }
  return s;
}

// plus adds b to a, times sign.
function plus(a, b, sign = 1) {
  for (const k of Object.keys(a)) a[k] += sign * b[k];
  return a;
}

function busy(n) {
  return n.status === "running" || n.status === "queued";
}

// soFar is what n has spent: what it reported (its usage) and, while it
// runs or when it never reported, what its own calls and its children
// have spent since.
function soFar(n) {
  const s = spentOf(n);
  if (!busy(n) && n.usage.length) return s;
  plus(s, n.live);
  for (const k of n.kids) {
    plus(s, soFar(k));
    const c = n.counted.get(k);
    if (c) plus(s, c, -1);
  }
  return s;
}

// waitOf is how long n has waited for a person; wallOf its wall time
// without that wait.
function waitOf(n) {
  return n.waitMs + (n.waitAt ? (n.finished || Date.now()) - n.waitAt : 0);
}

function wallOf(n) {
  if (!n.started) return 0;
  return Math.max(0, (n.finished || Date.now()) - n.started - waitOf(n));
}

function sec(ms) {
  return (ms / 1000).toFixed(2);
}

// drawBar places n's bar in the waterfall: where in its tree's span it
// started, and how long it ran.
function drawBar(n) {
  const bar = n.el.querySelector(":scope > summary .bar > i");
  const root = n.tree.root;
  if (!bar || !n.started || !root.started) return;
  const end = (x) => x.finished || Date.now();
  const span = Math.max(1, end(root) - root.started);
  const left = Math.min(1, Math.max(0, (n.started - root.started) / span));
  const width = Math.min(1 - left, Math.max(0.005, (end(n) - n.started) / span));
  bar.style.left = `${(100 * left).toFixed(2)}%`;
  bar.style.width = `${(100 * width).toFixed(2)}%`;
  bar.parentNode.title = `started ${sec(n.started - root.started)} s into the run, ran ${sec(end(n) - n.started)} s`;
}

// The timeline: beside each tree, a row per node in the tree's order, on
// one time axis from the run's start to its end (or now): a bar from when
// the node started to when it ended, with the time it was queued for
// admission and the time it waited for a person drawn apart on it. A
// group folded in the tree is one row in the timeline, spanning its
// children; a node folded hides its children's rows. A row clicked
// selects its node in the tree.

function newTimeline(tree) {
  const el = document.createElement("div");
  el.className = "timeline";
  el.setAttribute("role", "group");
  el.setAttribute("aria-label", "Timeline");
  const axis = document.createElement("p");
  axis.className = "axis";
  const legend = document.createElement("p");
  legend.className = "legend";
  legend.innerHTML = '<i class="span"></i> ran <i class="queued"></i> queued for admission <i class="waiting"></i> waiting for a person';
  const rows = document.createElement("div");
  rows.className = "rows";
  el.append(axis, rows, legend);
  return { el, axis, rows, dirty: true, shown: [] };
}

// timelineRows lists what the timeline shows, in the tree's order: nodes
// and groups as the tree has them folded.
function timelineRows(tree) {
  const out = [];
  const visit = (n, depth) => {
    if (n.el.hidden) return;
    out.push({ n, depth });
    if (!n.el.open) return;
    for (const c of n.el.querySelector(":scope > .children").children) {
      if (c.deputyNode) visit(c.deputyNode, depth + 1);
      else if (c.deputyGroup && !c.hidden) {
        const g = c.deputyGroup;
        out.push({ g, depth: depth + 1 });
        if (g.el.open) for (const k of g.body.children) if (k.deputyNode) visit(k.deputyNode, depth + 2);
      }
    }
  };
  visit(tree.root, 0);
  return out;
}

function drawTimeline(tree) {
  const tl = tree.timeline;
  tl.dirty = false;
  const now = Date.now();
  // A node ends when it finished; one running, or waiting for a person,
  // goes on now.
  const end = (n) => n.finished || (busy(n) || n.waitAt ? now : n.started);
  let t0 = Infinity, t1 = 0;
  for (const n of tree.nodes.values()) {
    if (!n.started) continue;
    t0 = Math.min(t0, n.started);
    t1 = Math.max(t1, end(n));
  }
  const rows = timelineRows(tree);
  if (t0 === Infinity) {
    tl.axis.textContent = "";
    tl.rows.replaceChildren();
    return;
  }
  const span = Math.max(1, t1 - t0);
  tl.axis.textContent = `0 s – ${sec(span)} s`;
  const pct = (x) => `${((100 * (x - t0)) / span).toFixed(3)}%`;
  const wid = (a, b) => `${((100 * Math.max(0, b - a)) / span).toFixed(3)}%`;
  const els = rows.map(({ n, g, depth }) => {
    let row;
    if (n) {
      row = n.row || (n.row = timelineRow(() => select(n.el)));
      row.dataset.status = n.status;
      row.dataset.name = n.name;
      row.dataset.node = n.id;
      row.querySelector(".label").textContent = n.name + (n.task ? ": " + clip(n.task, 60) : "");
      const track = row.querySelector(".track");
      const bar = track.querySelector(".span");
      if (!n.started) {
        bar.style.width = "0";
        row.title = `${n.name}: not started`;
        setSegments(track, "queued", []);
        setSegments(track, "waiting", []);
      } else {
        const e = end(n);
        bar.style.left = pct(n.started);
        bar.style.width = wid(n.started, e);
        const seg = (list) => list.map(([a, b]) => [pct(a), wid(a, b || e)]);
        setSegments(track, "queued", seg(n.queues));
        setSegments(track, "waiting", seg(n.waits));
        const queued = n.queuedMs + (n.queuedAt ? now - n.queuedAt : 0);
        row.title = `${n.name}: started ${sec(n.started - t0)} s in, ${sec(wallOf(n))} s of wall time` +
          (queued ? `, ${sec(queued)} s of it queued for admission` : "") + (waitOf(n) ? `, and ${sec(waitOf(n))} s waiting for a person` : "");
      }
    } else {
      row = g.row || (g.row = timelineRow(() => {
        g.el.open = true;
        select(g.el);
      }));
      row.dataset.status = g.el.dataset.failed ? "failed" : "";
      row.dataset.name = g.name;
      row.classList.add("group-row");
      row.querySelector(".label").textContent = g.line.textContent || g.name;
      let a = Infinity, b = 0;
      for (const k of g.kids) {
        if (!k.started) continue;
        a = Math.min(a, k.started);
        b = Math.max(b, end(k));
      }
      const bar = row.querySelector(".span");
      bar.style.left = a === Infinity ? "0" : pct(a);
      bar.style.width = a === Infinity ? "0" : wid(a, b);
      row.title = `${g.line.textContent}: the first started ${a === Infinity ? "–" : sec(a - t0)} s in, the last ended ${b ? sec(b - t0) : "–"} s in`;
    }
    row.style.setProperty("--depth", depth);
    return row;
  });
  if (els.length !== tl.shown.length || els.some((r, i) => r !== tl.shown[i])) {
    tl.rows.replaceChildren(...els);
    tl.shown = els;
  }
}

// timelineRow makes a row of the timeline, a button that runs pick.
function timelineRow(pick) {
  const row = document.createElement("button");
  row.type = "button";
  row.className = "row";
  row.innerHTML = '<span class="label"></span><span class="track"><i class="span"></i></span>';
  row.addEventListener("click", pick);
  return row;
}

// setSegments makes track hold one segment of class cls per [left, width].
function setSegments(track, cls, segs) {
  const have = track.querySelectorAll(`:scope > i.${cls}`);
  for (let i = segs.length; i < have.length; i++) have[i].remove();
  segs.forEach(([left, width], i) => {
    let el = have[i];
    if (!el) {
      el = document.createElement("i");
      el.className = cls;
      track.append(el);
    }
    el.style.left = left;
    el.style.width = width;
  });
}

// select shows a node (or a group) of the tree: what is folded above it
// opened, scrolled into view, marked and focused.
function select(el) {
  for (let p = el.parentElement; p; p = p.parentElement) if (p.tagName === "DETAILS") p.open = true;
  for (const old of document.querySelectorAll(".selected")) old.classList.remove("selected");
  el.classList.add("selected");
  const summary = el.querySelector(":scope > summary");
  el.scrollIntoView({ block: "nearest" });
  if (summary) summary.focus({ preventScroll: true });
}

function clip(s, n) {
  return s && s.length > n ? s.slice(0, n) + "…" : s || "";
}

// refilter shows the nodes whose status and text match the controls, and
// the nodes above them.
function refilter() {
  const status = $("filter").value;
  const q = $("search").value.toLowerCase();
  const visit = (n) => {
    let shown = (!status || n.status === status) && (!q || n.name.toLowerCase().includes(q) || n.text.toLowerCase().includes(q));
    for (const k of n.kids) shown = visit(k) || shown;
    n.el.hidden = !shown && n.parent !== null;
    for (const g of n.groups.values()) {
      const any = g.kids.some((k) => !k.el.hidden);
      g.el.hidden = !any;
      if (any && (status || q)) g.el.open = true;
    }
    return shown;
  };
  for (const t of trees) visit(t.root);
}

function say(msg) {
  $("status").textContent = msg;
}

// stream sends one run request and applies its events to tree as they come.
async function stream(tree, body, url = "run") {
  if (!tree.runId) tree.runId = body.runId; // the run that started the tree names its turn
  say(`Running ${body.runId} on thread ${body.threadId}…`);
  let resp;
  try {
    resp = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json", Accept: "text/event-stream" }, body: JSON.stringify(body) });
  } catch (err) {
    say("The server could not be reached: " + err.message);
    return;
  }
  if (!resp.ok) {
    const text = await resp.text();
    say(`The server refused the run (${resp.status}): ${text}`);
    return;
  }
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of frame.split("\n")) {
        if (line.startsWith("data: ")) tree.apply(JSON.parse(line.slice(6)));
      }
    }
  }
  finishedRuns++;
  schedule();
  listThreads(); // the run may have stored a new thread
  const r = tree.root;
  say(r.status === "suspended" ? "The run waits for answers: see the questions in the tree." : `Run ${body.runId}: ${r.status}.`);
}

function startRun(ev) {
  ev.preventDefault();
  const threadId = $("thread").value.trim() || newID("thread_");
  $("thread").value = threadId;
  const tree = new Tree(threadId, `thread ${threadId}`);
  trees.push(tree);
  stream(tree, { threadId, runId: newID("run_"), messages: [{ id: newID("msg_"), role: "user", content: $("message").value }], tools: [], context: [], forwardedProps: {} });
}

// History: the stored threads, and the recorded runs of one, redrawn.
async function listThreads() {
  const ul = $("threads");
  const resp = await fetch("threads/");
  if (!resp.ok) {
    ul.replaceChildren(item(`Threads are not kept here (${resp.status}).`));
    return;
  }
  const { threads } = await resp.json();
  ul.replaceChildren(...threads.map((id) => {
    const li = item(id);
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = "Open";
    b.setAttribute("aria-label", "Open thread " + id);
    b.addEventListener("click", () => openThread(id));
    li.append(b);
    return li;
  }));
  if (!threads.length) ul.replaceChildren(item("No stored threads yet."));
}

function item(text) {
  const li = document.createElement("li");
  const span = document.createElement("span");
  span.textContent = text;
  li.append(span);
  return li;
}

// openThread draws a page of the thread's recorded runs: the newest, or
// those before the run numbered before, below the newer ones drawn.
async function openThread(id, before) {
  const resp = await fetch("runs/" + encodeURIComponent(id) + (before ? "?before=" + before : ""));
  if (!resp.ok) {
    say(`Thread ${id} could not be read (${resp.status}).`);
    return;
  }
  const { runs, older, error } = await resp.json();
  const drawn = trees.length;
  let tree = null;
  for (const run of runs) {
    // A run that resumes a suspended one continues its tree; a re-run is
    // drawn beside the run it re-ran.
    if (run.rerun) {
      tree = new Tree(id, `re-run in thread ${id} (stored)`);
      tree.rerun = true;
      tree.runId = run.runId;
      trees.push(tree);
    } else if (!tree || tree.root.status !== "suspended") {
      tree = new Tree(id, `thread ${id} (stored)`);
      tree.runId = run.runId;
      trees.push(tree);
    } else {
      // It resumed the run before it: that run's questions were answered.
      tree.answered(run.answers || []);
    }
    for (const e of run.events) tree.apply(e);
    if (run.truncated) say(`Run ${run.runId} was recorded only in part.`);
  }
  $("thread").value = id;
  $("older")?.remove();
  if (before) {
    // Older runs go below those drawn, newest first.
    for (const t of trees.slice(drawn).reverse()) $("runs").append(t.el);
  }
  if (older) {
    const b = document.createElement("button");
    b.type = "button";
    b.id = "older";
    b.textContent = "Show older runs";
    b.addEventListener("click", () => openThread(id, older));
    $("runs").append(b);
  }
  if (error) {
    say(`Thread ${id}: ${error}`);
    return;
  }
  if (runs.length || before) {
    say(`Thread ${id}: ${runs.length} recorded runs${older ? ", and older ones" : ""}.`);
    return;
  }
  // No run of it was recorded (it was served elsewhere, or before a store
  // was set): its stored conversation still gives the lead's turns, with a
  // node for each call it made and the call's result.
  const th = await fetch("threads/" + encodeURIComponent(id));
  if (!th.ok) {
    say(`Thread ${id} has no recorded runs, and its conversation could not be read (${th.status}).`);
    return;
  }
  const { messages } = await th.json();
  const conv = new Tree(id, `thread ${id} (from its conversation)`);
  trees.push(conv);
  fromConversation(conv, messages || []);
  say(`Thread ${id}: drawn from its conversation (no run of it was recorded).`);
}

// fromConversation draws a tree from a stored conversation: the lead's
// text, and a node per tool call with its arguments and result.
function fromConversation(tree, messages) {
  const root = tree.root;
  root.status = "success";
  const byCall = new Map();
  for (const m of messages) {
    if (m.role === "assistant") {
      if (m.content) root.text += (root.text ? "\n" : "") + m.content;
      for (const c of m.toolCalls || []) {
        root.tools.set(c.id, { name: c.function.name, args: c.function.arguments, result: null });
        const n = tree.add("call:" + c.id, c.function.name, root);
        n.call = c.id;
        n.args = c.function.arguments;
        n.status = "running";
        byCall.set(c.id, n);
      }
    } else if (m.role === "tool") {
      const n = byCall.get(m.toolCallId);
      const t = root.tools.get(m.toolCallId);
      if (t) t.result = m.content;
      if (n) {
        n.result = m.content || "";
        n.text = n.result;
        n.status = m.error ? "failed" : partial(n.result) ? "partial" : "success";
        n.error = m.error || "";
        tree.touch(n);
      }
    }
  }
  tree.touch(root);
}

// openCassette draws the recorded run the viewer was given
// (devui.WithCassette): each place in its tree a node.
async function openCassette() {
  const resp = await fetch("cassette");
  if (!resp.ok) {
    say(`The cassette could not be read (${resp.status}).`);
    return;
  }
  const { runs } = await resp.json();
  for (const run of runs) {
    const tree = new Tree("", "recorded cassette");
    tree.rerun = true; // a recording is not re-run from the page
    tree.runId = run.runId;
    trees.push(tree);
    for (const e of run.events) tree.apply(e);
  }
  say("The recorded cassette: every model call of its run, at its place in the tree.");
}

function setOpen(open) {
  for (const t of trees) {
    for (const n of t.nodes.values()) {
      n.el.open = open;
      for (const g of n.groups.values()) g.el.open = open;
    }
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("thread").value = newID("thread_");
  $("start").addEventListener("submit", startRun);
  $("refresh").addEventListener("click", listThreads);
  // The timeline leaves out the rows of the nodes the filter hides.
  const filter = () => {
    refilter();
    for (const t of trees) t.retime();
  };
  $("filter").addEventListener("change", filter);
  $("search").addEventListener("input", filter);
  $("collapse").addEventListener("click", () => setOpen(false));
  $("expand").addEventListener("click", () => setOpen(true));
  // Running nodes' wall times move on.
  setInterval(() => {
    for (const t of trees) {
      for (const n of t.nodes.values()) if (busy(n)) t.touch(n);
      if (t.root.waitAt) t.retime(); // the wait for a person goes on
    }
  }, 500);
  listThreads();
  fetch("config").then((r) => r.json()).then((c) => {
    rerunOn = c.rerun;
    if (c.cassette) {
      const b = document.createElement("button");
      b.type = "button";
      b.id = "cassette";
      b.textContent = "Draw the recorded cassette";
      b.addEventListener("click", openCassette);
      $("threads").after(b);
    }
    for (const t of trees) for (const n of t.nodes.values()) t.touch(n);
  });
});
