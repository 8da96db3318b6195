// The HTTP client: GET a JSON endpoint by a path relative to the page (so any mount prefix works).

import { policyParams } from "./policy.js";

/** An error answer of the API: its message, the hint it gave and the HTTP status. */
export class ApiError extends Error {
  constructor(message, hint, status) {
    super(message);
    this.hint = hint;
    this.status = status;
  }
}

/** GET a JSON endpoint (path relative to the page) with query parameters; null/"" parameters are left out. */
export async function api(path, params = {}, signal = undefined) {
  const url = new URL(path, document.baseURI);
  for (const [k, v] of Object.entries({ ...policyParams(), ...params })) {
    if (v !== null && v !== undefined && v !== "") url.searchParams.set(k, String(v));
  }
  const response = await fetch(url, { signal, headers: { Accept: "application/json" } });
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  if (!response.ok) {
    throw new ApiError(body?.error || `${response.status} ${response.statusText}`, body?.hint || "", response.status);
  }
  return body;
}

export const enc = encodeURIComponent;
