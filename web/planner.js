// planner.js: the page's controls, its state in the URL, and its panels. Every
// number on the page is build/plan's own output for the flags the controls
// set (runWasi, wasi.js): the page parses and draws it, it computes nothing.
"use strict";

// The time panel's rate until one is given: a placeholder, said as one on the page.
const PLACEHOLDER_RATE = "20000";

// The controls: build/plan's flags, each with its default (null: not given).
// `panel` limits a flag to the one panel that takes it (the time model's, the
// timeline's); `skip` names the panels whose mode build/plan refuses it with
// (--layout draws placement alone; --traffic and --time leave out what changes
// memory alone; a clip only adds a collective). A panel names what it left out.
const CONTROLS = [
  { group: "Model", flag: "--config", kind: "select", options: ["d2", "d4", "d6", "d12", ""], value: "d12",
    empty: "(none: --dims or --params)", help: "a preset (d12 is GPT-2 124M); none: --dims or --params" },
  { group: "Model", flag: "--dims", kind: "text", value: null, help: "L,NH,C: blocks, heads, channels" },
  { group: "Model", flag: "--vocab", kind: "number", value: null, help: "vocabulary (default 50257)" },
  { group: "Model", flag: "--params", kind: "text", value: null,
    help: "instead of a model: model states alone for P parameters, e.g. 7.5e9" },
  { group: "Run", flag: "--ranks", kind: "number", value: "64", help: "ranks N, 1 to 1048576" },
  { group: "Run", flag: "--batch", skip: ["layout"], kind: "number", value: null, help: "global sequences (default 4 per rank)" },
  { group: "Run", flag: "--seq", skip: ["layout"], kind: "number", value: null, help: "sequence length (default 64)" },
  { group: "Run", flag: "--grad-accum", skip: ["layout"], kind: "number", value: null, help: "micro-batches per step" },
  { group: "Run", flag: "--accum-mode", skip: ["layout"], kind: "select", options: ["", "sync-each", "no-sync"], value: null },
  { group: "Run", flag: "--precision", skip: ["layout"], kind: "select", options: ["", "fp32", "bf16"], value: null },
  { group: "Run", flag: "--reduce-dtype", skip: ["layout"], kind: "select", options: ["", "fp32", "bf16"], value: null },
  { group: "Run", flag: "--recompute", skip: ["layout"], kind: "switch", value: null },
  { group: "Run", flag: "--fused-attention", skip: ["time", "network", "traffic", "layout"], kind: "switch", value: null },
  { group: "Run", flag: "--fused-classifier", skip: ["time", "network", "traffic", "layout"], kind: "switch", value: null },
  { group: "Run", flag: "--grad-clip", skip: ["memory", "timeline", "layout"], kind: "text", value: null, help: "a clip adds the norm's all-reduce" },
  { group: "Run", flag: "--ema", skip: ["time", "network", "traffic", "layout"], kind: "text", value: null, help: "decay of a moving average of the weights" },
  { group: "Run", flag: "--offload-optimizer", skip: ["traffic", "layout"], kind: "switch", value: null },
  { group: "Strategies", flag: "--prefetch", skip: ["layout"], kind: "number", value: null, help: "ZeRO-3, FSDP (default 1)" },
  { group: "Strategies", flag: "--unit-blocks", skip: ["layout"], kind: "number", value: null, help: "blocks per unit" },
  { group: "Strategies", flag: "--wrap-min-params", skip: ["layout"], kind: "text", value: null, help: "or: parameters per unit" },
  { group: "Strategies", flag: "--reshard-after-forward", skip: ["layout"], kind: "select", options: ["", "0", "1"], value: null },
  { group: "Strategies", flag: "--shard-min-numel", kind: "number", value: null,
    help: "FSDP: tensors below this kept whole" },
  { group: "Strategies", flag: "--shard-group", skip: ["layout"], kind: "number", value: null, help: "FSDP: hybrid groups of M" },
  { group: "Strategies", flag: "--quantize-weights", skip: ["layout"], kind: "select", options: ["", "int8"], value: null,
    help: "ZeRO++ qwZ" },
  { group: "Strategies", flag: "--quantize-grads", skip: ["layout"], kind: "select", options: ["", "int8", "int4"], value: null,
    help: "ZeRO++ qgZ" },
  { group: "Strategies", flag: "--quantize-grads-node", skip: ["layout"], kind: "number", value: null, help: "qgZ in two hops" },
  { group: "Strategies", flag: "--secondary-shard-group", skip: ["layout"], kind: "number", value: null, help: "ZeRO++ hpZ" },
  { group: "Strategies", flag: "--quantize-block", skip: ["layout"], kind: "number", value: null },
  { group: "Network", flag: "--tokens-per-s", kind: "text", value: PLACEHOLDER_RATE, panel: ["time", "network"],
    help: "one rank's measured tokens/s (train_single's tokens_per_s; a report's link carries its run's)" },
  { group: "Network", flag: "--ranks-per-node", kind: "number", value: null, panel: ["time", "network"],
    help: "ranks per machine (default 8)" },
  { group: "Network", flag: "--within", kind: "text", value: null, panel: ["time", "network"], help: "latency s, GB/s" },
  { group: "Network", flag: "--across", kind: "text", value: null, panel: ["time", "network"], help: "latency s, GB/s" },
  { group: "Timeline", flag: "--timeline", kind: "select", options: ["ddp", "zero1", "zero2", "zero3", "fsdp"],
    value: "fsdp", panel: "timeline" },
  { group: "Timeline", flag: "--rank", kind: "number", value: null, panel: "timeline" },
  { group: "Compare", flag: "--vs", kind: "text", value: null, panel: "page", size: 30,
    help: "a second plan: the flags it changes, as in the address (secondary-shard-group=8&recompute&ranks=128)" },
];

const CATEGORIES = ["params", "params_gathered", "grads", "grads_gathered", "optim", "activations", "comm_buffers",
  "ema", "host_optim", "host_staging"];
const COLORS = ["#4e79a7", "#a0cbe8", "#f28e2b", "#ffbe7d", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#9c755f",
  "#bab0ac"];
const HOST = new Set(["host_optim", "host_staging"]);

// ---------------------------------------------------------------- state

// The controls' values from the URL's fragment (#config=d12&ranks=64&...); a
// flag the fragment names without a value is a switch that is on.
function readState() {
  const state = Object.fromEntries(CONTROLS.map((c) => [c.flag, c.value]));
  state.refused = [];  // what the address asked that the page cannot take, said on the page
  applyFragment(state, location.hash.replace(/^#/, ""), true);
  return state;
}

// Sets state's flags from a fragment ("config=d4&recompute&ranks=8"): the address's, or --vs's changes
// (decoded: --vs holds them as typed). A part naming no flag is left out.
function applyFragment(state, fragment, encoded, unknown = null) {
  const decode = (text) => { if (!encoded) return text; try { return decodeURIComponent(text); } catch (e) { return text; } };
  for (const part of fragment.split("&").filter(Boolean)) {
    const at = part.indexOf("=");
    const flag = "--" + decode(at < 0 ? part : part.slice(0, at));
    if (!(flag in state) || (unknown && flag === "--vs")) { if (unknown) unknown.push(part); continue; }
    const value = at < 0 ? "" : decode(part.slice(at + 1));
    const control = CONTROLS.find((c) => c.flag === flag);
    if (control.kind !== "switch") state[flag] = value;
    else if (SWITCH_ON.includes(value.toLowerCase())) state[flag] = "1";
    else if (SWITCH_OFF.includes(value.toLowerCase())) state[flag] = null;
    else state.refused.push(`#${decode(part)}: a switch is on (${SWITCH_ON.filter(Boolean).join(", ")}, or no ` +
                            `value) or off (${SWITCH_OFF.join(", ")}); left at its default`);
  }
}
// A switch in the address: "#recompute" or "#recompute=1" is on, "#recompute=0" off.
const SWITCH_ON = ["", "1", "true", "on", "yes"];
const SWITCH_OFF = ["0", "false", "off", "no"];

function writeState(state) {
  const parts = CONTROLS.filter((c) => state[c.flag] !== c.value).map((c) => {
    const name = c.flag.slice(2), value = state[c.flag];
    if (c.kind === "switch") return value ? name : null;
    return `${name}=${value === null ? "" : encodeURIComponent(value)}`;
  }).filter((p) => p !== null);
  history.replaceState(null, "", "#" + parts.join("&"));
}

// build/plan's arguments for a panel: every given flag of the model, the run
// and the strategies, and the panel's own.
// `takes`: each strategy's own flags (build/plan --strategies), for the timeline,
// which runs one strategy and refuses the flags it does not take.
function planArgs(state, panel, takes, leftOut = []) {
  const args = [];
  for (const c of CONTROLS) {
    const value = state[c.flag];
    if (c.panel && ![].concat(c.panel).includes(panel)) continue;  // (--vs: the page's own, build/plan's none)
    if (value === null || value === "") continue;
    if (c.skip && c.skip.includes(panel)) { leftOut.push(c.flag); continue; }
    const chosen = takes.get(state["--timeline"]);
    if (panel === "timeline" && c.group === "Strategies" && chosen && !chosen.has(c.flag)) {
      leftOut.push(c.flag);
      continue;
    }
    if (c.kind === "switch") { if (value) args.push(c.flag); continue; }
    args.push(c.flag, String(value));
  }
  return args;
}

// ---------------------------------------------------------------- drawing

// Bytes in MB with three decimals, as build/plan's printf prints them: the
// double's exact value to the nearest, an exact tie to the even last digit
// (toFixed would round it up). A double is an exact tie at three decimals only
// when it is an odd number of sixteenths (odd/2000 with a power-of-two
// denominator); 240477500 bytes, 240.4775 MB, is a little below its tie, 240.477.
function MB(bytes) {
  const mb = bytes / 1e6, sixteenths = mb * 16;  // exact: times a power of two
  if (!Number.isInteger(sixteenths) || sixteenths % 2 === 0) return mb.toFixed(3);
  const below = Math.floor(mb * 1000);  // exact: an odd number of 62.5 thousandths
  return ((below % 2 === 0 ? below : below + 1) / 1000).toFixed(3);
}

function element(tag, attributes = {}, text = "") {
  const svg = ["svg", "rect", "line", "polyline", "text", "g", "title", "path"].includes(tag);
  const e = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attributes)) e.setAttribute(k, v);
  if (text) e.textContent = text;
  return e;
}

function svgText(svg, x, y, text, anchor = "start", size = 11) {
  svg.appendChild(element("text", { x, y, "text-anchor": anchor, "font-size": size }, text));
}

// The categories' key under a chart: a swatch and a name for each category k where shown(k).
function categoryKey(svg, left, height, shown) {
  let lx = left;
  CATEGORIES.forEach((c, k) => {
    if (!shown(k)) return;
    svg.appendChild(element("rect", { x: lx, y: height - 18, width: 10, height: 10, fill: COLORS[k] }));
    svgText(svg, lx + 13, height - 9, c, "start", 10);
    lx += 16 + 6.2 * c.length;
  });
}

// A table: the header's cells, then each row's; its first `words` columns text, the others numbers (right
// aligned); a cell given as {text, changed: true} is marked.
function numbersTable(id, header, rows, words = 1) {
  const table = element("table", { class: "numbers", id });
  const head = element("tr");
  header.forEach((h) => head.appendChild(element("th", {}, h)));
  table.appendChild(head);
  for (const row of rows) {
    const tr = element("tr");
    row.forEach((cell, i) => {
      const marked = typeof cell === "object" && cell.changed;
      tr.appendChild(element("td", i < words ? {} : { class: marked ? "n changed" : "n" },
        typeof cell === "object" ? cell.text : String(cell)));
    });
    table.appendChild(tr);
  }
  return table;
}

// Each strategy's fullest row (the largest peak of its ranks), in the rows' order.
function fullestRows(rows) {
  const fullest = new Map();
  for (const r of rows) if (!fullest.has(r.strategy) || r.peak > fullest.get(r.strategy).peak) fullest.set(r.strategy, r);
  return fullest;
}

// --tsv: strategy, ranks, one column per category, peak, reserved peak (bytes).
function parseTable(tsv) {
  return tsv.trim().split("\n").map((line) => {
    const f = line.split("\t");
    return { strategy: f[0], ranks: f[1], bytes: f.slice(2, 2 + CATEGORIES.length).map(Number),
      peak: Number(f[2 + CATEGORIES.length]), reserved: Number(f[3 + CATEGORIES.length]) };
  });
}

// The stacked bars of `rows` (their categories at their own peaks), a row a bar.
function stackedBars(rows, label) {
  const thin = rows.length > 16;  // many ranks: thin bars, every 8th labelled
  const width = 760, left = 130, barHeight = thin ? 5 : 14, height = 34 + rows.length * (barHeight + 4);
  const svg = element("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "chart" });
  const device = (r) => r.bytes.reduce((s, b, k) => s + (HOST.has(CATEGORIES[k]) ? 0 : b), 0);
  const scale = (width - left - 120) / (Math.max(...rows.map(device)) || 1);
  rows.forEach((r, i) => {
    const y = 6 + i * (barHeight + 4);
    if (!thin || i % 8 === 0) svgText(svg, left - 6, y + (thin ? 6 : 11), label(r), "end", thin ? 9 : 11);
    let x = left;
    r.bytes.forEach((b, k) => {  // the device's categories; the host's are in the table
      if (HOST.has(CATEGORIES[k]) || b === 0) return;
      const rect = element("rect", { x, y, width: Math.max(b * scale, 0.5), height: barHeight, fill: COLORS[k] });
      rect.appendChild(element("title", {}, `${CATEGORIES[k]}: ${MB(b)} MB`));
      svg.appendChild(rect);
      x += b * scale;
    });
    if (!thin || i % 8 === 0) svgText(svg, x + 4, y + (thin ? 6 : 11), `peak ${MB(r.peak)} MB`, "start", thin ? 9 : 11);
  });
  categoryKey(svg, left, height, (k) => !HOST.has(CATEGORIES[k]) && rows.some((r) => r.bytes[k] > 0));
  return svg;
}

// Each strategy's fullest rank side by side; then, where a strategy's ranks
// differ (ZeRO-3's ownership), its ranks one by one (up to 64); the table of
// every row in MB as build/plan prints it.
function drawMemory(panel, rows) {
  const strategies = [...new Set(rows.map((r) => r.strategy))];
  const fullest = [...fullestRows(rows).values()];
  panel.append(element("p", { class: "note" }, "Each bar stacks a rank's categories at their own peaks (each at its " +
    "fullest moment, so together they may pass the peak: the fullest moment of their sum, written after the bar). " +
    "The device's categories; an offloaded optimizer's host bytes are in the table. MB = 10^6 bytes, as build/plan " +
    "prints them. Each strategy's fullest rank:"), stackedBars(fullest, (r) => `${r.strategy} rank ${r.ranks}`));
  for (const s of strategies) {  // folded: ranks alike share a row already; many rows open on request
    const mine = rows.filter((r) => r.strategy === s);
    if (mine.length < 2) continue;
    const fold = element("details", mine.length <= 8 ? { open: "" } : {});
    fold.append(element("summary", { class: "note" }, `${s}: its ranks differ, ${mine.length} rows` +
      (mine.length > 64 ? ` (the first 64 drawn)` : "")), stackedBars(mine.slice(0, 64), (r) => `${s} rank ${r.ranks}`));
    panel.append(fold);
  }
  const held = CATEGORIES.map((_, k) => rows.some((r) => r.bytes[k] > 0));
  const table = numbersTable("memory-table", ["strategy", "rank(s)", ...CATEGORIES.filter((_, k) => held[k]), "peak",
    "reserved"], rows.map((r) => [r.strategy, r.ranks, ...r.bytes.filter((_, k) => held[k]).map(MB), MB(r.peak),
    MB(r.reserved)]), 2);
  const folded = element("details", rows.length <= 16 ? { open: "" } : {});
  folded.append(element("summary", { class: "note" }, `The table, ${rows.length} rows: MB per rank, every ` +
    "category's peak, the peak of their sum, and what the allocator reserves at its peak (in use + kept for " +
    "reuse). Categories no rank holds are left out."), table);
  panel.append(folded);
}

// --timeline: every category's bytes after each event, stacked (the device's and the host's alike, as the
// timeline counts them), the phases' boundaries marked, the peak's moment named in MB.
function drawTimeline(panel, text) {
  const lines = text.trim().split("\n");
  const events = lines.filter((l) => !l.startsWith("#")).map((l) => l.split("\t"))
    .map((f) => ({ phase: f[1], unit: Number(f[2]), category: f[3], bytes: Number(f[4]), total: Number(f[5]) }));
  const start = (lines.find((l) => l.startsWith("# start:")) || "").replace("# start:", "").trim().split(/\s+/);
  const held = Object.fromEntries(CATEGORIES.map((c) => [c, 0]));
  for (let i = 0; i + 1 < start.length; i += 2) held[start[i]] = Number(start[i + 1]);
  const levels = [CATEGORIES.map((c) => held[c])];  // before the first event, then after each
  for (const e of events) {
    held[e.category] += e.bytes;
    levels.push(CATEGORIES.map((c) => held[c]));
  }
  const shown = CATEGORIES.map((_, k) => levels.some((l) => l[k] > 0));
  const width = 760, height = 260, left = 70, bottom = 52, top = 10;
  const svg = element("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "chart" });
  const most = Math.max(1, ...levels.map((l) => l.reduce((a, b) => a + b, 0)));
  const x = (i) => left + (i / Math.max(1, levels.length)) * (width - left - 10);
  const y = (b) => height - bottom - (b / most) * (height - bottom - top);
  const below = levels.map(() => 0);
  CATEGORIES.forEach((c, k) => {  // each category a band on the ones before it, a step per event
    if (!shown[k]) return;
    const upper = [], lower = [];
    levels.forEach((l, i) => {
      upper.push(`${x(i)},${y(below[i] + l[k])}`, `${x(i + 1)},${y(below[i] + l[k])}`);
      lower.push(`${x(i + 1)},${y(below[i])}`, `${x(i)},${y(below[i])}`);
      below[i] += l[k];
    });
    const band = element("polyline", { points: [...upper, ...lower.reverse()].join(" "), fill: COLORS[k],
      stroke: "none" });
    band.appendChild(element("title", {}, c));
    svg.appendChild(band);
  });
  const pass = (p) => (p.endsWith("fwd") || p === "forward" ? "forward" : p.endsWith("bwd") || p === "backward" ||
    p === "reduce" ? "backward" : p);  // finish grads, optimizer: their own
  let phase = "";  // the passes' boundaries marked
  events.forEach((e, i) => {
    const now = pass(e.phase);
    if (now === phase) return;
    phase = now;
    svg.appendChild(element("line", { x1: x(i + 1), x2: x(i + 1), y1: top, y2: height - bottom, stroke: "#999",
      "stroke-dasharray": "2,3" }));
    const near = x(i + 1) > width - 70;  // by the right edge: the label left of its line, the last one lower
    svgText(svg, x(i + 1) + (near ? -2 : 2), top + 9 + (near && now === "optimizer" ? 10 : 0), now,
      near ? "end" : "start", 9);
  });
  for (const b of [0, most / 2, most]) svgText(svg, left - 4, y(b) + 4, `${MB(b)}`, "end", 10);
  svgText(svg, left, height - bottom + 14, `the step's ${events.length} memory events, in order; MB held after each`,
    "start", 10);
  categoryKey(svg, left, height, (k) => shown[k]);
  const peakLine = lines.find((l) => l.startsWith("# peak:")) || "";
  // "# peak: B bytes at event N (phase, unit u): category bytes ..." (or ", held from the step's start ...")
  const peak = peakLine.match(/^# peak: (\d+) bytes(.*?): ((?:\S+ \d+ ?)+)$/);
  if (!peak) { panel.append(svg, element("p", { class: "note", id: "timeline-peak" }, peakLine.replace(/^# /, ""))); return; }
  const at = (peak[2].match(/ at event (\d+)/) || [])[1];
  if (at !== undefined)
    svg.appendChild(element("line", { x1: x(Number(at) + 1), x2: x(Number(at) + 1), y1: top, y2: height - bottom,
      stroke: "#e15759" }));
  const parts = peak[3].trim().split(" "), then = [];
  for (let i = 0; i + 1 < parts.length; i += 2) if (Number(parts[i + 1]) > 0) then.push(`${parts[i]} ${MB(Number(parts[i + 1]))}`);
  panel.append(svg, element("p", { class: "note", id: "timeline-peak" }, `The peak: ${MB(Number(peak[1]))} MB` +
    `${peak[2]}${at !== undefined ? " (the red line)" : ""}; held then, in MB: ${then.join(", ")}.`));
}

// --time: the opening line as a note, the table as a table (a strategy and N a row), the rate it assumes said.
function drawTime(panel, text, state) {
  const rate = state["--tokens-per-s"];
  const placeholder = rate === PLACEHOLDER_RATE;
  panel.append(element("p", { class: placeholder ? "placeholder" : "note", id: "time-rate" }, placeholder
    ? `One rank's rate here is ${rate} tokens/s, a placeholder, not a measurement: every time below scales with ` +
      "it. Give your train_single's tokens_per_s in --tokens-per-s (a report's link to this page carries its run's)."
    : `One rank's rate: ${rate} tokens/s, as given in --tokens-per-s.`));
  const lines = text.trim().split("\n");
  const at = lines.findIndex((l) => /^\s+N\s/.test(l));
  if (at < 0) { panel.append(element("pre", {}, text)); return; }
  const names = ["strategy", ...lines[at].trim().split(/\s{2,}/)];
  const row = (line) => line.trim().split(/\s+/), isRow = (line) => row(line).length === names.length;
  lines.slice(0, at).forEach((l) => panel.append(element("p", { class: "note" }, l)));
  panel.append(numbersTable("time-table", names, lines.slice(at + 1).filter(isRow).map(row)));
  lines.slice(at + 1).filter((l) => !isRow(l)).forEach((l) => panel.append(element("p", { class: "note" }, l)));
}

// --traffic: per strategy and collective, the bytes a rank sends in one step
// (the least and the most over the ranks).
function drawTraffic(panel, text) {
  const sums = new Map();
  for (const line of text.trim().split("\n")) {
    if (line.startsWith("#")) continue;
    const [strategy, rank, collective, calls, , sent] = line.split("\t");
    const key = `${strategy}\t${collective}`;
    const s = sums.get(key) || { strategy, collective, fewest: Infinity, calls: 0, least: Infinity, most: 0, ranks: 0 };
    s.fewest = Math.min(s.fewest, Number(calls));
    s.calls = Math.max(s.calls, Number(calls));
    s.least = Math.min(s.least, Number(sent));
    s.most = Math.max(s.most, Number(sent));
    s.ranks++;
    sums.set(key, s);
  }
  panel.append(numbersTable("traffic-table", ["strategy", "collective", "calls per rank", "MB sent per rank",
    "ranks that call it"], [...sums.values()].map((s) => [s.strategy, s.collective,
    s.fewest === s.calls ? s.calls : `${s.fewest} to ${s.calls}`,
    s.least === s.most ? MB(s.most) : `${MB(s.least)} to ${MB(s.most)}`, s.ranks]), 2));
}

// --layout: which elements of the flat model each rank keeps, per strategy.
function drawLayout(panel, text) {
  const strategies = new Map(), kinds = new Map();  // a tensor kind's span over the layers: llm.c's order
  let P = 0;
  for (const line of text.trim().split("\n")) {
    const f = line.split("\t");
    if (f[0] === "tensor") {
      P = Math.max(P, Number(f[3]));
      const kind = f[1].replace(/^h\d+\./, ""), span = kinds.get(kind) || [Infinity, 0];
      kinds.set(kind, [Math.min(span[0], Number(f[2])), Math.max(span[1], Number(f[3]))]);
      continue;
    }
    if (f[0] !== "hold" && f[0] !== "pad") continue;
    const s = strategies.get(f[1]) || { ranks: new Map() };
    const rank = Number(f[2]);
    if (!s.ranks.has(rank)) s.ranks.set(rank, []);
    s.ranks.get(rank).push({ kind: f[0], begin: Number(f[3]), end: f[0] === "pad" ? Number(f[3]) + Number(f[4]) : Number(f[4]) });
    strategies.set(f[1], s);
  }
  const most = 16, width = 760, left = 70, rowHeight = 7;
  const at = (e) => left + (Math.min(e, P) / (P || 1)) * (width - left - 10);
  const axis = element("svg", { width, height: 46, viewBox: `0 0 ${width} 46`, class: "chart", id: "layout-axis" });
  [...kinds].forEach(([kind, [begin, end]], i) => {  // the tensors, by kind, across the flat model
    axis.appendChild(element("rect", { x: at(begin), y: 4, width: Math.max(0.5, at(end) - at(begin)), height: 14,
      fill: i % 2 ? "#ddd" : "#bbb" })).appendChild(element("title", {}, `${kind}: elements ${begin} to ${end}`));
    if (at(end) - at(begin) > 6.5 * kind.length) svgText(axis, (at(begin) + at(end)) / 2, 15, kind, "middle", 9);
  });
  for (const e of [0, P / 2, P]) {
    axis.appendChild(element("line", { x1: at(e), x2: at(e), y1: 20, y2: 25, stroke: "#333" }));
    svgText(axis, at(e), 35, `${(e / 1e6).toFixed(1)}M`, e === P ? "end" : e ? "middle" : "start", 9);
  }
  svgText(axis, left - 4, 15, "tensors", "end", 9);
  svgText(axis, left - 4, 35, "element", "end", 9);
  panel.append(element("p", { class: "note" }, "The flat model in llm.c's order (each tensor kind's elements " +
    "for every layer side by side; hover for a kind's span), its elements in millions; under it, each strategy's " +
    "ranks on the same scale:"), axis);
  for (const [name, s] of strategies) {
    const ranks = [...s.ranks.keys()].sort((a, b) => a - b).slice(0, most);
    const height = 18 + ranks.length * (rowHeight + 2);
    const svg = element("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "chart" });
    svgText(svg, 0, 12, name, "start", 12);
    const scale = (width - left - 10) / (P || 1);
    ranks.forEach((r, i) => {
      const y = 16 + i * (rowHeight + 2);
      svgText(svg, left - 4, y + rowHeight, `rank ${r}`, "end", 8);
      for (const piece of s.ranks.get(r)) {
        svg.appendChild(element("rect", { x: left + Math.min(piece.begin, P) * scale, y,
          width: Math.max(0.5, (Math.min(piece.end, P) - Math.min(piece.begin, P)) * scale || 2), height: rowHeight,
          fill: piece.kind === "pad" ? "#e15759" : "#4e79a7" }));
      }
    });
    panel.append(svg);
  }
  panel.append(element("p", { class: "note" }, `Blue: the elements of the flat model (0 to ${P}) a rank keeps; ` +
    "red: FSDP's padding rows, drawn just past the end of the tensor they pad (they hold no element of the " +
    `model). The first ${most} ranks of each strategy.`));
}

// --time --tsv's rows at the plan's own N: strategy, N, group, compute, comm, exposed, step (s), tokens/s,
// offload (s), and rank 0's bytes sent in the step, then those of them among ranks of more than one machine.
function timeRows(tsv) {
  const rows = tsv.trim().split("\n").map((l) => l.split("\t"));
  const N = Math.max(...rows.map((f) => Number(f[1])));
  return rows.filter((f) => Number(f[1]) === N).map((f) => ({ strategy: f[0], N, step: Number(f[6]),
    sent: Number(f[9]), across: Number(f[10]) }));
}

// Rank 0's bytes in one step, inside its machine and across machines: what hpZ and qgZ move off the network.
function drawNetwork(panel, text, state) {
  const rows = timeRows(text);
  const G = state["--ranks-per-node"] || "8";
  panel.append(element("p", { class: "note" }, `Rank 0's collectives in one training step at N = ${rows[0].N}, ` +
    `machines of ${G} ranks (--ranks-per-node): the MB it sends in collectives among the ranks of its own machine ` +
    "alone, and in collectives whose ranks span machines, which the slower link between machines carries " +
    "(build/plan --time --tsv's last two fields: all it sends, and the latter)."));
  panel.append(numbersTable("network-table", ["strategy", "MB sent", "within its machine", "spanning machines",
    "spanning, share"], rows.map((r) => [r.strategy, MB(r.sent), MB(r.sent - r.across), MB(r.across),
    r.sent ? `${(100 * r.across / r.sent).toFixed(0)}%` : "-"])));
}

// Runs one plan for a panel and keeps its output beside the drawing (the test holds it against build/plan).
function planned(module, box, args) {
  const run = runCached(module, args);
  const raw = element("pre", { class: "raw", hidden: "" }, run.stdout);
  raw.dataset.args = JSON.stringify(args);
  raw.dataset.code = String(run.code);
  box.append(raw);
  return run;
}

// The plan beside a second one whose flags --vs changes: each strategy's fullest rank's peak, rank 0's bytes
// across machines and its predicted step at N, side by side, the changed cells marked.
function showCompare(module, panel, state, takes) {
  const box = document.getElementById(panel.id);
  box.replaceChildren(element("h2", {}, panel.title));
  if (!state["--vs"]) {
    box.append(element("p", { class: "note" }, "Give --vs the flags a second plan changes, as in the address " +
      "(secondary-shard-group=8, or quantize-grads=int4&quantize-grads-node=8, recompute, ranks=128): this " +
      "panel puts the two side by side."));
    return;
  }
  const other = { ...state, refused: [] }, unknown = [];
  applyFragment(other, state["--vs"], false, unknown);
  if (unknown.length) box.append(element("p", { class: "refused" }, `--vs: ${unknown.join(", ")}: not a flag ` +
    "of the page; left out"));
  const args = [state, other].map((st) => ({ memory: [...planArgs(st, "memory", takes), "--tsv"],
    network: [...planArgs(st, "network", takes), "--time", "--tsv"] }));
  const plans = args.map((a) => ({ memory: planned(module, box, a.memory), network: planned(module, box, a.network) }));
  const same = JSON.stringify(args[0]) === JSON.stringify(args[1]);
  box.append(element("p", { class: "command" }, `A: build/plan ${args[0].memory.slice(0, -1).join(" ")}`),
    element("p", { class: "command" }, `B: build/plan ${args[1].memory.slice(0, -1).join(" ")}` +
      (same ? " (the same plan: --vs changes nothing)" : "")));
  const failed = plans.flatMap((p) => [p.memory, p.network]).filter((r) => r.code !== 0);
  if (failed.length) { box.append(element("p", { class: "refused" }, failed[0].stderr.trim())); return; }
  const [peakA, peakB] = plans.map((p) => fullestRows(parseTable(p.memory.stdout)));
  const [timeA, timeB] = plans.map((p) => new Map(timeRows(p.network.stdout).map((r) => [r.strategy, r])));
  const rows = [];
  for (const [s, a] of peakA) {
    const b = peakB.get(s), ta = timeA.get(s), tb = timeB.get(s);
    if (!b || !ta || !tb) continue;
    const pairs = [[MB(a.peak), MB(b.peak)], [MB(ta.across), MB(tb.across)],
                   [(1e3 * ta.step).toFixed(3), (1e3 * tb.step).toFixed(3)]];
    rows.push([s, ...pairs.flatMap(([x, y]) => [x, { text: y, changed: x !== y }])]);
  }
  const table = numbersTable("compare-table", ["strategy", "peak MB, A", "B", "MB spanning machines, A", "B",
    "step ms, A", "B"], rows);
  box.append(element("p", { class: "note" }, "Each strategy's fullest rank's peak (MB), rank 0's bytes sent in " +
    "collectives spanning machines in a step and its predicted step (ms) at the plans' own N, from build/plan --tsv and " +
    "--time --tsv; B's cells that differ from A's are marked."), table);
}

// ---------------------------------------------------------------- panels

const PANELS = [
  { id: "memory", title: "Peak memory per rank, by category", mode: ["--tsv"], draw: (p, out) => drawMemory(p, parseTable(out)) },
  { id: "compare", title: "Compared with a second plan (--vs)", show: showCompare },
  { id: "timeline", title: "Memory over one step", mode: [], draw: drawTimeline },
  { id: "traffic", title: "Bytes per collective per rank, one step", mode: ["--traffic"], draw: drawTraffic },
  { id: "time", title: "Predicted step time", mode: ["--time"], draw: drawTime },
  { id: "network", title: "Bytes rank 0 sends within its machine and across machines, one step", mode: ["--time", "--tsv"],
    draw: drawNetwork },
  { id: "layout", title: "Who keeps which parameters", mode: ["--layout"], draw: drawLayout },
];

// The last plans run, by their arguments: a change that leaves a panel's own
// flags as they were redraws it without running build/plan again.
const RUNS = new Map();
function runCached(module, args) {
  const key = JSON.stringify(args);
  if (!RUNS.has(key)) {
    RUNS.set(key, runWasi(module, args));
    if (RUNS.size > 64) RUNS.delete(RUNS.keys().next().value);
  }
  return RUNS.get(key);
}

// Runs one panel's plan and draws it; a refusal is shown in its place.
function showPanel(module, panel, state, takes) {
  const box = document.getElementById(panel.id);
  box.replaceChildren(element("h2", {}, panel.title));
  const leftOut = [];
  const args = [...planArgs(state, panel.id, takes, leftOut), ...panel.mode];
  const started = performance.now();
  box.append(element("p", { class: "command" }, "build/plan " + args.join(" ")));
  if (leftOut.length) box.append(element("p", { class: "note" }, `Left out here: ${leftOut.join(" ")} ` +
    "(this panel's mode of build/plan does not take them)."));
  const run = planned(module, box, args);
  if (run.code !== 0) box.append(element("p", { class: "refused" }, run.stderr.trim()));
  else panel.draw(box, run.stdout, state);
  const ms = performance.now() - started;
  box.querySelector(".command").append(` (${ms.toFixed(0)} ms)`);
  return ms;
}

// The model states alone (--params): build/plan's table as it prints it.
const PARAMS_PANEL = { id: "memory", title: "Model states per rank (--params)", mode: [],
  draw: (p, out) => p.append(element("pre", {}, out)) };
function showParams(module, state, takes) {
  showPanel(module, PARAMS_PANEL, state, takes);
  for (const p of PANELS.slice(1)) document.getElementById(p.id).replaceChildren(
    element("p", { class: "note" }, "--params plans the model states alone: give a model for this panel."));
}

function buildControls(state, onChange) {
  const form = document.getElementById("controls");
  const groups = new Map();
  for (const c of CONTROLS) {
    if (!groups.has(c.group)) {
      const fieldset = element("fieldset");
      fieldset.appendChild(element("legend", {}, c.group));
      groups.set(c.group, fieldset);
      form.appendChild(fieldset);
    }
    const label = element("label", { title: c.help || "" }, c.flag + " ");
    let input;
    if (c.kind === "select") {
      input = element("select");
      for (const o of c.options) input.appendChild(element("option", { value: o }, o || c.empty || "(default)"));
      input.value = state[c.flag] || "";
    } else if (c.kind === "switch") {
      input = element("input", { type: "checkbox" });
      input.checked = Boolean(state[c.flag]);
    } else {
      input = element("input", { type: c.kind === "number" ? "number" : "text", size: c.size || 10 });
      input.value = state[c.flag] || "";
    }
    input.id = "control" + c.flag;
    input.addEventListener("change", () => {
      state[c.flag] = c.kind === "switch" ? (input.checked ? "1" : null) : (input.value === "" ? null : input.value);
      if (c.kind !== "switch" && input.value === "" && c.value !== null) state[c.flag] = "";
      onChange();
    });
    label.appendChild(input);
    groups.get(c.group).appendChild(label);
  }
}

// Redraws every panel, one after another, saying which it is on: a page of
// 2^16 ranks takes seconds, and the browser paints between the panels.
// A change during a redraw starts another: the older one stops at its next panel.
let generation = 0;
function redraw(module, state, takes) {
  writeState(state);
  const status = document.getElementById("status");
  const started = performance.now(), mine = ++generation;
  document.body.dataset.done = "0";
  if (state["--params"]) {
    showParams(module, state, takes);
    status.textContent = `done in ${(performance.now() - started).toFixed(0)} ms`;
    document.body.dataset.done = "1";
    return;
  }
  const queue = [...PANELS];
  const next = () => {
    if (mine !== generation) return;
    const panel = queue.shift();
    if (!panel) {
      const ms = performance.now() - started;
      status.textContent = `done in ${ms.toFixed(0)} ms`;
      document.getElementById("redraw-ms").textContent = ms.toFixed(0);
      document.body.dataset.done = "1";
      return;
    }
    status.textContent = `computing: ${panel.title} (${PANELS.length - queue.length} of ${PANELS.length})`;
    (panel.show || showPanel)(module, panel, state, takes);
    setTimeout(next, 0);
  };
  next();
}

// Each strategy's own flags, from build/plan --strategies (its last column).
function strategyFlags(module) {
  const takes = new Map();
  for (const line of runWasi(module, ["--strategies"]).stdout.trim().split("\n")) {
    if (line.startsWith("#")) continue;
    const fields = line.split("\t");
    takes.set(fields[0], new Set(fields[fields.length - 1].split(" ").filter(Boolean)));
  }
  return takes;
}

function main() {
  const module = planModule();
  const state = readState(), takes = strategyFlags(module);
  if (state.refused.length) {  // said once, above the panels, each with what the page did instead
    const status = document.getElementById("status");
    status.before(element("p", { class: "refused", id: "address-refused" }, state.refused.join("; ")));
  }
  buildControls(state, () => redraw(module, state, takes));
  redraw(module, state, takes);
}

main();
