// The Interlock policy replay page: sign in with an admin API key, paste or upload a
// draft policy, and see what it would have decided differently on the calls the
// tenant's audit log holds (POST ../v1/audit/replay).
//
// Rules this file keeps (as app.js does; the server's Content-Security-Policy
// enforces most of them):
// - the key lives in sessionStorage only (the approvals page's slot): never a cookie,
//   never a URL;
// - every piece of server data reaches the page through textContent, never innerHTML;
// - no inline handlers: listeners are attached here.
"use strict";

(() => {
  const KEY_SLOT = "interlock.apiKey";
  const API = new URL("../v1/", document.baseURI);
  const LABELS = new Map([
    ["deny_to_allow", "deny → allow"],
    ["deny_to_approval", "deny → require_approval"],
    ["approval_removed", "require_approval → allow (approval removed)"],
    ["allow_to_deny", "allow → deny"],
    ["approval_added", "allow → require_approval (approval added)"],
    ["approval_to_deny", "require_approval → deny"],
    ["undetermined_changed", "to or from undetermined"],
    ["rules_changed", "same verdict, other rules"],
    ["cannot_tell", "cannot tell (redacted or unrecorded)"],
  ]);

  const byId = (id) => {
    const node = document.getElementById(id);
    if (node === null) throw new Error(`the page has no #${id}`);
    return node;
  };
  const ui = {
    signIn: byId("sign-in"),
    signInForm: byId("sign-in-form"),
    keyInput: byId("api-key"),
    signInError: byId("sign-in-error"),
    who: byId("who"),
    whoText: byId("who-text"),
    signOut: byId("sign-out"),
    draft: byId("draft"),
    form: byId("replay-form"),
    file: byId("policy-file"),
    text: byId("policy-text"),
    since: byId("since"),
    until: byId("until"),
    agent: byId("agent"),
    tool: byId("tool"),
    run: byId("run"),
    status: byId("replay-status"),
    error: byId("replay-error"),
    result: byId("result"),
    summary: byId("summary"),
    verdict: byId("verdict"),
    changes: byId("changes-body"),
    stateful: byId("stateful"),
    neverFired: byId("never-fired"),
    rules: byId("rules-body"),
    examples: byId("examples"),
  };
  let key = null;

  class ApiFailure extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(method, path, body, withKey = key) {
    const headers = { Accept: "application/json", Authorization: `Bearer ${withKey}` };
    const init = { method, headers, cache: "no-store", credentials: "omit", redirect: "error" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(new URL(path, API), init);
    } catch {
      throw new ApiFailure(0, "unreachable", "the Interlock server cannot be reached");
    }
    let data = null;
    try {
      data = await response.json();
    } catch {
      data = null;
    }
    if (!response.ok) {
      const error = data !== null && typeof data === "object" ? data.error : null;
      const message =
        error && typeof error.message === "string"
          ? error.message
          : `the server answered HTTP ${response.status}`;
      throw new ApiFailure(response.status, error ? error.code : "error", message);
    }
    return data;
  }

  function h(tag, attributes = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) {
      if (name.startsWith("on")) throw new Error("no inline handlers");
      node.setAttribute(name, String(value));
    }
    node.append(...children.filter((child) => child !== null && child !== undefined));
    return node;
  }

  function show(node, text) {
    node.textContent = text;
    node.hidden = false;
  }

  function hide(node) {
    node.textContent = "";
    node.hidden = true;
  }

  // -- sign in -------------------------------------------------------------------------

  async function signIn(candidate) {
    const who = await api("GET", "whoami", undefined, candidate);
    if (who.role !== "admin") {
      throw new ApiFailure(
        403,
        "forbidden",
        `this key cannot replay the log (it is the ${who.role} key "${who.name}"): ` +
          "sign in with an admin key",
      );
    }
    return who;
  }

  function start(candidate, who) {
    key = candidate;
    sessionStorage.setItem(KEY_SLOT, candidate);
    ui.whoText.textContent = `Signed in as ${who.name} (${who.role}, tenant ${who.tenant})`;
    ui.who.hidden = false;
    ui.signIn.hidden = true;
    ui.draft.hidden = false;
    hide(ui.signInError);
    ui.keyInput.value = "";
  }

  function stop(problem) {
    key = null;
    sessionStorage.removeItem(KEY_SLOT);
    ui.who.hidden = true;
    ui.draft.hidden = true;
    ui.result.hidden = true;
    ui.signIn.hidden = false;
    if (problem) show(ui.signInError, problem);
    else hide(ui.signInError);
    ui.keyInput.focus();
  }

  async function onSignIn(event) {
    event.preventDefault();
    const candidate = ui.keyInput.value.trim();
    if (candidate === "") {
      show(ui.signInError, "Paste an API key first.");
      return;
    }
    try {
      start(candidate, await signIn(candidate));
    } catch (failure) {
      show(
        ui.signInError,
        failure.status === 401
          ? `This key was not accepted: ${failure.message}.`
          : `Could not sign in: ${failure.message}.`,
      );
    }
  }

  // -- the replay ----------------------------------------------------------------------

  function microseconds(input) {
    if (input.value === "") return undefined;
    const moment = new Date(input.value); // local time, as the label says
    return Number.isNaN(moment.getTime()) ? undefined : moment.getTime() * 1000;
  }

  function request() {
    const body = { policy: ui.text.value, examples: 3 };
    const since = microseconds(ui.since);
    const until = microseconds(ui.until);
    if (since !== undefined) body.since_us = since;
    if (until !== undefined) body.until_us = until;
    if (ui.agent.value.trim() !== "") body.agent = ui.agent.value.trim();
    if (ui.tool.value.trim() !== "") body.tool = ui.tool.value.trim();
    return body;
  }

  async function onReplay(event) {
    event.preventDefault();
    hide(ui.error);
    if (ui.text.value.trim() === "") {
      show(ui.error, "Paste or upload a draft policy first.");
      return;
    }
    ui.run.disabled = true;
    ui.status.textContent = "Replaying…";
    try {
      render(await api("POST", "audit/replay", request()));
      ui.status.textContent = "";
    } catch (failure) {
      ui.status.textContent = "";
      if (failure.status === 401) {
        stop(`Signed out: ${failure.message}.`);
        return;
      }
      show(ui.error, failure.message);
      ui.result.hidden = true;
    } finally {
      ui.run.disabled = false;
    }
  }

  async function onFile() {
    const file = ui.file.files && ui.file.files[0];
    if (!file) return;
    ui.text.value = await file.text();
  }

  function render(report) {
    const { records, outcome } = report;
    ui.summary.textContent =
      `${records.replayed} recorded decisions replayed: ${outcome.unchanged} unchanged, ` +
      `${outcome.rules_changed} with the same verdict by other rules, ` +
      `${outcome.changed} changed, ${outcome.cannot_tell} cannot tell` +
      (records.truncated ? " (cut short: the record limit was reached)" : "") +
      ".";
    const loosening = new Set(report.loosening);
    ui.verdict.textContent =
      `${report.loosened} calls would be loosened, ${report.tightened} tightened.`;
    ui.verdict.className = report.loosened > 0 ? "verdict-fail" : "verdict-ok";
    ui.changes.replaceChildren(
      ...Object.entries(report.changes).map(([name, count]) =>
        h(
          "tr",
          {
            class: loosening.has(name) && count > 0 ? "loosened" : "",
            "data-change": name,
            "data-testid": "change",
          },
          h("td", {}, (loosening.has(name) ? "LOOSENED " : "") + LABELS.get(name)),
          h("td", {}, String(count)),
        ),
      ),
    );
    const parts = [
      ...Object.entries(report.stateful.recorded).map(([id, n]) => `recorded ${id}: ${n}`),
      ...Object.entries(report.stateful.draft).map(([id, n]) => `draft ${id} covers ${n}`),
    ];
    ui.stateful.textContent = parts.length ? `Stateful, not replayed: ${parts.join("; ")}.` : "";
    ui.neverFired.textContent = report.never_fired.length
      ? `Never fired under the draft: ${report.never_fired.join(", ")}`
      : "Every rule of the draft fired.";
    ui.rules.replaceChildren(
      ...Object.entries(report.rules).map(([id, counts]) =>
        h(
          "tr",
          { "data-rule": id },
          h("td", {}, id),
          h("td", {}, String(counts.old)),
          h("td", {}, String(counts.new)),
          h(
            "td",
            {},
            Object.entries(counts.changes)
              .map(([name, n]) => `${n} ${name}`)
              .join(", "),
          ),
        ),
      ),
    );
    ui.examples.replaceChildren(
      ...Object.entries(report.examples).map(([name, found]) =>
        h(
          "div",
          { "data-testid": "example-group", "data-change": name },
          h("h4", {}, LABELS.get(name) || name),
          ...found.map((example) =>
            h(
              "p",
              { class: loosening.has(name) ? "example loosened" : "example" },
              `${example.time} ${example.tenant}/${example.agent} ${example.tool} ` +
                `${example.arguments}\nrecorded ${example.recorded.verdict} ` +
                `[${example.recorded.rule_ids.join(", ")}] → draft ${example.draft.verdict} ` +
                `[${example.draft.rule_ids.join(", ")}]: ${example.draft.reason}` +
                (example.why ? `\ncannot tell: ${example.why}` : ""),
            ),
          ),
        ),
      ),
    );
    ui.result.hidden = false;
  }

  ui.signInForm.addEventListener("submit", onSignIn);
  ui.signOut.addEventListener("click", () => stop(null));
  ui.form.addEventListener("submit", onReplay);
  ui.file.addEventListener("change", onFile);

  const saved = sessionStorage.getItem(KEY_SLOT);
  if (saved) {
    signIn(saved).then(
      (who) => start(saved, who),
      (failure) => stop(failure.status === 403 ? failure.message : null),
    );
  }
})();
