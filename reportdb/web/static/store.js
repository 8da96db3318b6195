// The page's store of changes: views say what changed (`changed("view")`, `changed("view", { soon: true })`) and
// whoever cares subscribes (the URL writer keeps the location hash; the verdict names a core once the core map
// arrives), so no view imports the modules that react to it. Reading the URL lives here too.

const listeners = new Map(); // topic -> Set of functions

/** Call ``fn(detail)`` on every change of ``topic``; returns the function that unsubscribes it. */
export function subscribe(topic, fn) {
  if (!listeners.has(topic)) listeners.set(topic, new Set());
  listeners.get(topic).add(fn);
  return () => listeners.get(topic).delete(fn);
}

/** Tell the subscribers of ``topic`` that it changed (``detail``: what changed, for those who need it). */
export function changed(topic, detail = {}) {
  for (const fn of [...(listeners.get(topic) || [])]) fn(detail);
}

/** The location hash's parameters (the view a link asks for). */
export function hashParams() {
  return new URLSearchParams(location.hash.slice(1));
}
