// An operation's context: arguments, stack trace, duration, producers and consumers as links, comparisons.

import { api, enc } from "./api.js";
import { $, el } from "./dom.js";
import { fmt, fmtPcc } from "./format.js";
import { state } from "./state.js";
import { changed } from "./store.js";
import { roleBadge } from "./tables.js";

let contextSeq = 0;

/** A link to another operation of the report. */
function opLink(ref) {
  const b = el("button", { className: "linkish mono" }, `#${ref.operation_id} ${ref.name}`);
  b.dataset.opLink = ref.operation_id;
  b.addEventListener("click", () => changed("wanted-operation", { id: ref.operation_id }));
  return b;
}

export async function loadContext(opId) {
  const seq = ++contextSeq;
  const box = $("#op-context");
  box.dataset.opId = "";
  let c;
  try {
    c = await api(`api/reports/${enc(state.report)}/operations/${opId}`);
  } catch (err) {
    $("#context-summary").textContent = err.message;
    return;
  }
  if (seq !== contextSeq) return;
  const devices = c.device_ids.length ? ` \u00b7 device ${c.device_ids.join(", ")}` : "";
  $("#context-summary").textContent = `${c.name} \u00b7 ` + (c.duration === null ? "duration not recorded" : `duration ${fmt(c.duration, 6)}`) +
    devices + ` \u00b7 ${c.arguments.length} arguments` + (c.stack_trace ? " \u00b7 stack trace" : "");
  const rows = [el("tr", {}, ...["", "tensor", "shape", "dtype", "produced by", "consumed by", "comparisons"].map((h) => el("th", {}, h)))];
  for (const [label, list] of [["in", c.inputs], ["out", c.outputs]]) {
    for (const t of list) {
      const producer = el("td", {});
      if (t.producer) producer.append(opLink(t.producer));
      const consumers = el("td", {});
      for (const ref of t.consumers.slice(0, 8)) consumers.append(opLink(ref));
      if (t.consumer_count > 8) consumers.append(el("span", { className: "muted" }, ` +${t.consumer_count - 8}`));
      const comps = el("td", {});
      for (const k of t.comparisons) {
        const text = `${k.kind} ${k.verdict ?? k.status}` + (k.failed.length ? ` (${k.failed.join(", ")})` : "") +
          (k.pcc === null ? "" : ` pcc ${fmtPcc(k.pcc)}`);
        const line = el("div", {}, el("span", { className: "mono" }, text + " "));
        if (k.role) line.append(roleBadge(k.role));
        comps.append(line);
      }
      const tr = el("tr", {}, el("td", { className: "mono" }, `${label}${t.index}`), el("td", { className: "mono" }, `t${t.tensor_id}`),
        el("td", { className: "mono" }, t.shape ?? ""), el("td", { className: "mono" }, t.dtype ?? ""), producer, consumers, comps);
      tr.dataset.tensorId = t.tensor_id;
      rows.push(tr);
    }
  }
  $("#context-tensors").replaceChildren(...rows);
  const args = [];
  for (const [name, value] of c.arguments) {
    const text = value === null ? "" : value.length > 400 ? value.slice(0, 400) + "\u2026" : value;
    args.push(el("dt", {}, name), el("dd", { className: "mono", title: value ?? "" }, text));
  }
  $("#context-args").replaceChildren(...(args.length ? args : [el("dd", { className: "muted" }, "none recorded")]));
  let stack = c.stack_trace || "no stack trace recorded";
  for (const src of c.source) {
    stack += `\n\n${src.path}:${src.line}\n` + src.lines.map((l, k) => `${String(src.first_line + k).padStart(5)}${src.first_line + k === src.line ? " >" : "  "} ${l}`).join("\n");
  }
  $("#context-stack").textContent = stack;
  box.dataset.opId = String(opId);
}
