// The tolerance policy the page's verdicts follow: a selector of the policies the server offers (api/policies:
// the defaults, `reportdb serve --policy`'s files, TOML pasted here and checked by the server). The choice lives in
// the URL (#...&policy=NAME) and every API request carries it (policyParams()), so a pasted link opens the same
// verdicts; choosing another reloads the page's view under it.

let chosen = "default";

/** The query parameters that choose the policy ({} for the defaults), for every API request and the URL. */
export function policyParams() {
  return chosen === "default" ? {} : { policy: chosen };
}

function node(tag, props = {}, ...children) {
  const n = Object.assign(document.createElement(tag), props);
  n.append(...children);
  return n;
}

async function json(url, init = undefined) {
  const response = await fetch(new URL(url, document.baseURI), { headers: { Accept: "application/json" }, ...init });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new Error(body?.error || `${response.status} ${response.statusText}`);
  return body;
}

/** Reopen the page's view under policy ``name``: the URL keeps everything else the view holds. */
function switchTo(name) {
  const hash = new URLSearchParams(location.hash.slice(1));
  if (name === "default") hash.delete("policy");
  else hash.set("policy", name);
  history.replaceState(null, "", `#${hash}`);
  location.reload();
}

const PASTE = "__paste__";

/** Mount the selector in ``container`` (awaited before the page's first request: the URL's policy is checked
 * against the server's list first, an unknown one dropped with a note). */
export async function mountPolicy(container) {
  const wanted = new URLSearchParams(location.hash.slice(1)).get("policy") || "default";
  let listed = [{ name: "default", rules: [] }];
  try {
    listed = (await json("api/policies")).policies;
  } catch (_) {
    // an older server: the defaults only
  }
  const names = listed.map((p) => p.name);
  chosen = names.includes(wanted) ? wanted : "default";
  const select = node("select", { id: "policy-select", ariaLabel: "Tolerance policy" },
    ...listed.map((p) => node("option", { value: p.name, title: describeRules(p) }, p.name === "default" ? "defaults (by dtype)" : p.name)),
    node("option", { value: PASTE }, "paste TOML\u2026"));
  select.value = chosen;
  const note = node("span", { className: "policy-note", id: "policy-note" });
  note.style.cssText = "font-size: 12px; margin-left: 6px; color: #f3b7b3; max-width: 40em; overflow: hidden; text-overflow: ellipsis; white-space: nowrap;";
  if (wanted !== chosen) note.textContent = `policy ${wanted} is not served: the defaults apply`;
  const label = node("label", { className: "field", title: describeRules(listed.find((p) => p.name === chosen)) }, "Policy ", select);
  const dialog = pasteDialog(note);
  container.replaceChildren(label, note, dialog);
  container.dataset.policy = chosen;
  select.addEventListener("change", () => {
    if (select.value === PASTE) {
      select.value = chosen;
      dialog.showModal();
      return;
    }
    switchTo(select.value);
  });
}

/** The rules of a listed policy as one line, for a tooltip. */
function describeRules(p) {
  if (!p || !p.rules?.length) return "the dtype-aware defaults (reportdb.analysis.policy)";
  return p.rules.map((r) => Object.entries(r).map(([k, v]) => `${k}=${v}`).join(" ")).join("; ");
}

/** The dialog where a TOML policy is pasted: the server checks it (its error shown in one line) and names it. */
function pasteDialog(note) {
  const text = node("textarea", { id: "policy-text", rows: 10, cols: 60, spellcheck: false,
    placeholder: '[[rules]]\nop = "ttnn.matmul"\ndtype = "BFLOAT16"\npcc = 0.98' });
  text.style.cssText = "font-family: var(--mono, monospace); width: 100%; box-sizing: border-box;";
  const error = node("div", { id: "policy-error", role: "alert" });
  error.style.cssText = "color: #c4302b; min-height: 1.3em; font-size: 12px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis;";
  const use = node("button", { id: "policy-use", type: "button" }, "Use this policy");
  const cancel = node("button", { type: "button", className: "ghost" }, "Cancel");
  const dialog = node("dialog", { id: "policy-dialog" }, node("h3", {}, "Paste a tolerance policy (TOML [[rules]])"), text, error,
    node("div", {}, use, " ", cancel));
  dialog.style.width = "min(640px, 90vw)";
  cancel.addEventListener("click", () => dialog.close());
  use.addEventListener("click", async () => {
    error.textContent = "";
    try {
      const found = await json("api/policies", { method: "POST", body: text.value, headers: { "Content-Type": "text/plain" } });
      switchTo(found.name);
    } catch (err) {
      error.textContent = String(err.message || err).split("\n")[0];
      error.title = error.textContent;
    }
  });
  return dialog;
}
