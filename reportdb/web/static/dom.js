// Page plumbing: element lookup and creation (text only, never HTML), the status bar, debouncing.


export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
/** A new element with properties and text or child nodes. Report text only ever reaches the page as text (no
 * string is parsed as HTML anywhere on this page), since a report is someone else's data. */
export function el(tag, props = {}, ...children) {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
}

let statusTimer = 0;
/** Show a message in the status bar (errors stay until replaced or closed by time). */
export function showStatus(message, kind = "error") {
  const el = $("#status");
  el.textContent = message;
  el.className = kind;
  el.hidden = false;
  clearTimeout(statusTimer);
  statusTimer = setTimeout(() => { el.hidden = true; }, kind === "error" ? 9000 : 2500);
}

/** Report a failed request to the user (message and hint); aborted requests are silent. */
export function reportError(err) {
  if (err?.name === "AbortError") return;
  const hint = err?.hint ? ` \u2014 ${err.hint}` : "";
  showStatus(`${err?.message || err}${hint}`);
  console.error(err);
}

export function debounce(fn, ms) {
  let t = 0;
  return (...args) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...args), ms);
  };
}
