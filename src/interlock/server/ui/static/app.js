// The Interlock approvals page: sign in with an API key, watch the tenant's pending
// approvals, approve or deny each with a reason, see what was decided last (by whom,
// why).
//
// Rules this file keeps (the server's Content-Security-Policy enforces most of them):
// - the key lives in sessionStorage only: never a cookie, never a URL;
// - every piece of server data reaches the page through textContent or a Text node,
//   never through innerHTML, so a tool argument is always shown as text;
// - what the server redacted is shown as a marked span naming the kind of secret, so a
//   hidden span can never pass for part of the command around it;
// - no inline handlers: listeners are attached here.
"use strict";

(() => {
  const KEY_SLOT = "interlock.apiKey";
  const POLL_MS = 1000;
  const PAGE_SIZE = 200;
  const MAX_NOTICES = 5;
  // "Recently decided" shows the RECENT_SHOWN latest decisions (by decision time), picked
  // from the tenant's newest approvals of every status: as many as were pending at the
  // last poll plus RECENT_WINDOW, at most MAX_LIMIT (the API's cap). The API lists by
  // creation and has no "not pending" filter, so a decision drops out of this list once
  // about RECENT_WINDOW approvals newer than the one decided have been closed; the audit
  // log keeps them all.
  const RECENT_SHOWN = 20;
  const RECENT_WINDOW = 100;
  const MAX_LIMIT = 1000;
  // The UI is served at <root>/ui/ and the API at <root>/v1/: relative, so the pair
  // also works behind a proxy that serves the server under a path prefix.
  const API = new URL("../v1/", document.baseURI);

  const CONTEXT_LABELS = [
    ["agent", "Agent"],
    ["tenant", "Tenant"],
    ["session_id", "Session"],
    ["run_id", "Run"],
    ["call_id", "Call id"],
    ["agent_type", "Agent type"],
    ["runtime", "Runtime"],
    ["downstream", "Downstream"],
    ["idempotency_key", "Idempotency key"],
  ];
  const SHOWN_ACTION_FIELDS = new Set(["kind", "name", "arguments"]);
  // The server replaces each secret with [REDACTED:<kind>] (a value under a key that
  // names a secret reads [REDACTED]); nothing else is ever hidden.
  const MARKER = /\[REDACTED(?::([a-z0-9-]+))?\]/g;
  // How each closed status reads. The status is always spelled out: the colour (the
  // class) only repeats it.
  const STATUS_LABELS = new Map([
    ["approved", "Approved"],
    ["claimed", "Approved and used"],
    ["denied", "Denied"],
    ["expired", "Expired"],
  ]);

  const byId = (id) => {
    const node = document.getElementById(id);
    if (node === null) throw new Error(`the page has no #${id}`);
    return node;
  };
  const ui = {
    signIn: byId("sign-in"),
    form: byId("sign-in-form"),
    keyInput: byId("api-key"),
    signInButton: byId("sign-in-button"),
    signInError: byId("sign-in-error"),
    who: byId("who"),
    whoText: byId("who-text"),
    signOut: byId("sign-out"),
    queue: byId("queue"),
    count: byId("pending-count"),
    live: byId("live"),
    notices: byId("notices"),
    empty: byId("empty"),
    truncated: byId("truncated"),
    list: byId("pending"),
    recent: byId("recent"),
    recentEmpty: byId("recent-empty"),
    decided: byId("decided"),
  };

  /** An error answer of the API (or no answer: status 0). */
  class ApiFailure extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  // -- state --------------------------------------------------------------------------

  const session = {
    key: null, // the API key, mirrored in sessionStorage
    generation: 0, // bumped on sign-out: answers of an older session are dropped
    timer: null,
  };
  const cards = new Map(); // approval id -> card (see buildCard)
  const closed = new Map(); // approval id -> item of "Recently decided" (see buildClosed)
  let pendingSeen = 0; // how many the last pending answer held (sizes the recent window)
  // An approval named in the URL's fragment (/ui/#apr_...: the policy's approvals.url
  // may point there). The fragment never reaches the server.
  let linked = null;
  const gone = new Set(); // ids decided here: a poll answered before it must not revive them

  // -- the API ------------------------------------------------------------------------

  async function api(method, path, { key = session.key, body } = {}) {
    const headers = { Accept: "application/json", Authorization: `Bearer ${key}` };
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
      const code = error && typeof error.code === "string" ? error.code : "error";
      throw new ApiFailure(response.status, code, message);
    }
    return data;
  }

  // -- small DOM helpers (text only) --------------------------------------------------

  /** A new element with attributes (never event handlers) and text or node children. */
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

  function sentence(text) {
    const trimmed = String(text).trim();
    const capital = trimmed.charAt(0).toUpperCase() + trimmed.slice(1);
    return /[.!?]$/.test(capital) ? capital : `${capital}.`;
  }

  function notice(text, tone) {
    ui.notices.prepend(h("p", { class: `notice ${tone}`, "data-testid": "notice" }, text));
    while (ui.notices.children.length > MAX_NOTICES) ui.notices.lastElementChild.remove();
  }

  function timeOf(microseconds) {
    const when = new Date(Math.floor(microseconds / 1000));
    return h("time", { datetime: when.toISOString() }, when.toLocaleString());
  }

  function relative(microseconds) {
    const minutes = Math.round((microseconds / 1000 - Date.now()) / 60000);
    if (minutes <= 0) return "now";
    if (minutes < 120) return `in ${minutes} min`;
    return `in ${Math.round(minutes / 60)} h`;
  }

  function ago(microseconds) {
    const minutes = Math.round((Date.now() - microseconds / 1000) / 60000);
    if (minutes <= 0) return "just now";
    if (minutes < 120) return `${minutes} min ago`;
    const hours = Math.round(minutes / 60);
    if (hours < 48) return `${hours} h ago`;
    return `${Math.round(hours / 24)} d ago`;
  }

  function display(value) {
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  /** ``text`` as nodes for h(): plain text, and each redaction marker as a <mark>. */
  function marked(text) {
    const nodes = [];
    let last = 0;
    for (const found of text.matchAll(MARKER)) {
      if (found.index > last) nodes.push(text.slice(last, found.index));
      const kind = found[1] ?? "secret";
      nodes.push(
        h(
          "mark",
          {
            class: "redacted",
            "data-testid": "redacted",
            "data-kind": kind,
            title: `Hidden by the server: ${kind}`,
          },
          found[0],
        ),
      );
      last = found.index + found[0].length;
    }
    if (last < text.length) nodes.push(text.slice(last));
    return nodes;
  }

  /** A line that says how many secrets the text had hidden, and of which kinds (none:
   * no line). The marks themselves show where. */
  function redactionSummary(text) {
    const kinds = [...text.matchAll(MARKER)].map((found) => found[1] ?? "secret");
    if (kinds.length === 0) return null;
    const count = kinds.length === 1 ? "1 secret hidden" : `${kinds.length} secrets hidden`;
    return h(
      "p",
      { class: "redaction-summary", "data-testid": "redaction-summary" },
      `${count} (${[...new Set(kinds)].join(", ")}), marked below; ` +
        "everything else is shown as the tool receives it.",
    );
  }

  // -- signing in and out -------------------------------------------------------------

  async function signIn(key) {
    const who = await api("GET", "whoami", { key });
    try {
      await api("GET", "approvals?status=pending&limit=1", { key });
    } catch (failure) {
      if (failure.status === 403) {
        throw new ApiFailure(
          403,
          failure.code,
          `this key cannot see approvals (it is the ${who.role} key "${who.name}"): ` +
            "sign in with an approver or admin key",
        );
      }
      throw failure;
    }
    return who;
  }

  function start(key, who) {
    session.generation += 1; // one poll loop per session, however sign-in was reached
    clearTimeout(session.timer);
    session.key = key;
    sessionStorage.setItem(KEY_SLOT, key);
    ui.whoText.textContent = `Signed in as ${who.name} (${who.role}, tenant ${who.tenant})`;
    ui.who.hidden = false;
    ui.signIn.hidden = true;
    ui.queue.hidden = false;
    ui.recent.hidden = false;
    hide(ui.signInError);
    ui.keyInput.value = "";
    ui.live.textContent = "Connecting…";
    poll(session.generation);
  }

  function stop(problem) {
    session.generation += 1;
    clearTimeout(session.timer);
    session.key = null;
    sessionStorage.removeItem(KEY_SLOT);
    for (const id of [...cards.keys()]) removeCard(id);
    for (const id of [...closed.keys()]) removeClosed(id);
    pendingSeen = 0;
    gone.clear();
    ui.notices.replaceChildren();
    ui.who.hidden = true;
    ui.whoText.textContent = "";
    ui.queue.hidden = true;
    ui.recent.hidden = true;
    ui.signIn.hidden = false;
    if (problem) show(ui.signInError, problem);
    else hide(ui.signInError);
    ui.keyInput.focus();
  }

  function signInProblem(failure) {
    if (failure.status === 401) return `This key was not accepted: ${failure.message}.`;
    if (failure.status === 403) return sentence(failure.message);
    return `Could not sign in: ${failure.message}.`;
  }

  async function onSubmit(event) {
    event.preventDefault();
    const key = ui.keyInput.value.trim();
    if (key === "") {
      show(ui.signInError, "Enter an API key.");
      return;
    }
    if (!/^[\x21-\x7e]+$/.test(key)) {
      show(ui.signInError, "That is not an API key: keys read ilk_<id>_<secret>.");
      return;
    }
    ui.signInButton.disabled = true;
    hide(ui.signInError);
    try {
      start(key, await signIn(key));
    } catch (failure) {
      show(ui.signInError, signInProblem(failure));
    } finally {
      ui.signInButton.disabled = false;
    }
  }

  // -- the pending list ---------------------------------------------------------------

  async function poll(generation) {
    if (generation !== session.generation) return;
    try {
      // Two requests, sent together (one round trip). A single status=all page cannot
      // stand in for the pending one: it is ordered by creation, so how many pending
      // approvals it holds would depend on how many were decided since, and the
      // "newest PAGE_SIZE pending" note could no longer be told; fetching enough to be
      // sure would mean up to 1000 full approvals a second. The pending request stays
      // as it was; the second one is small unless many are pending.
      const recentLimit = Math.min(MAX_LIMIT, pendingSeen + RECENT_WINDOW);
      const [pending, latest] = await Promise.all([
        api("GET", `approvals?status=pending&limit=${PAGE_SIZE}`),
        api("GET", `approvals?status=all&limit=${recentLimit}`),
      ]);
      if (generation !== session.generation) return;
      pendingSeen = pending.approvals.length;
      const decided = latest.approvals.filter((approval) => approval.status !== "pending");
      render(pending.approvals, new Set(decided.map((approval) => approval.id)));
      renderClosed(decided);
      setLive("Live: new requests appear here as they come.", false);
    } catch (failure) {
      if (generation !== session.generation) return;
      if (failure.status === 401 || failure.status === 403) {
        stop(`Signed out: ${failure.message}.`);
        return;
      }
      setLive(`Not live: ${failure.message}; retrying…`, true);
    }
    session.timer = setTimeout(() => poll(generation), POLL_MS);
  }

  /** The status line is a live region: it changes only when the state does, so a
   * screen reader is not told "updated" every second. */
  function setLive(text, stale) {
    if (ui.live.textContent !== text) ui.live.textContent = text;
    ui.live.classList.toggle("stale", stale);
  }

  /** The pending list. `decided`: the ids the other answer of the same poll shows
   * decided. A decision is final, so when the two answers disagree (one was read just
   * before a decision, the other just after) the decided one is the newer. */
  function render(approvals, decided) {
    const listed = new Set(approvals.map((approval) => approval.id));
    for (const id of [...gone]) if (!listed.has(id)) gone.delete(id);
    const shown = approvals.filter(
      (approval) => !gone.has(approval.id) && !decided.has(approval.id),
    );
    const wanted = new Set(shown.map((approval) => approval.id));
    for (const id of [...cards.keys()]) if (!wanted.has(id)) removeCard(id);
    // Newest first, as the server lists them. A card is only moved when it is out of
    // place, so a reason being typed keeps its focus.
    shown.forEach((approval, index) => {
      let card = cards.get(approval.id);
      if (card === undefined) {
        card = buildCard(approval);
        cards.set(approval.id, card);
      }
      card.expiry.textContent = ` (${relative(approval.expires_us)})`;
      const here = ui.list.children[index] ?? null;
      if (here !== card.node) ui.list.insertBefore(card.node, here);
    });
    ui.count.textContent = String(shown.length);
    ui.empty.hidden = shown.length > 0;
    if (linked !== null && !wanted.has(linked)) {
      notice(`${linked} is not pending: decided, expired or unknown.`, "warn");
      linked = null;
    }
    focusLinked();
    if (approvals.length >= PAGE_SIZE) {
      show(ui.truncated, `Showing the newest ${PAGE_SIZE} pending approvals.`);
    } else hide(ui.truncated);
  }

  function removeCard(id) {
    const card = cards.get(id);
    if (card === undefined) return;
    card.node.remove();
    cards.delete(id);
    ui.count.textContent = String(cards.size);
    ui.empty.hidden = cards.size > 0;
  }

  function contextRows(approval) {
    const context = approval.context ?? {};
    const rows = [];
    const add = (label, value) => rows.push(h("dt", {}, label), h("dd", {}, value));
    const addText = (label, value) => add(label, h("span", {}, ...marked(display(value))));
    const agent = approval.requested_by ?? context.agent;
    for (const [field, label] of CONTEXT_LABELS) {
      const value = field === "agent" ? agent : context[field];
      if (value !== null && value !== undefined && value !== "") addText(label, value);
    }
    for (const [field, value] of Object.entries(context)) {
      const known = CONTEXT_LABELS.some(([name]) => name === field);
      if (!known && value !== null && value !== undefined) addText(field, value);
    }
    const action = approval.action ?? {};
    for (const [field, value] of Object.entries(action)) {
      if (!SHOWN_ACTION_FIELDS.has(field) && value !== null && value !== undefined) {
        addText(field, value);
      }
    }
    add("Rules", (approval.rule_ids ?? []).join(", ") || "—");
    add("Requested", timeOf(approval.created_us));
    const expiry = h("span", { "data-testid": "approval-expiry-relative" });
    add("Expires", h("span", {}, timeOf(approval.expires_us), expiry));
    return { rows, expiry };
  }

  /** The heading of an approval, in both lists: its kind, its name and its id. */
  function summary(approval) {
    const action = approval.action ?? {};
    return h(
      "div",
      { class: "card-head" },
      h(
        "h3",
        {},
        h("span", { class: "kind", "data-testid": "approval-kind" }, display(action.kind ?? "call")),
        " ",
        h("code", { "data-testid": "approval-name" }, display(action.name ?? "(unnamed)")),
      ),
      h("span", { class: "id", "data-testid": "approval-id" }, approval.id),
    );
  }

  /** One approval as a card: the exact call, its context, and the decision controls. */
  function buildCard(approval) {
    const action = approval.action ?? {};
    const name = display(action.name ?? "(unnamed)");
    const reasonId = `reason-${approval.id}`;
    const { rows, expiry } = contextRows(approval);
    const argumentsText = JSON.stringify(action.arguments ?? {}, null, 2);
    const reasonBox = h("textarea", {
      id: reasonId,
      rows: 2,
      maxlength: 4000,
      "data-testid": "decision-reason",
      placeholder: "Why you approve or deny (kept in the audit log)",
    });
    const approveButton = h("button", { type: "button", class: "approve", "data-testid": "approve" }, "Approve");
    const denyButton = h("button", { type: "button", class: "deny", "data-testid": "deny" }, "Deny");
    const error = h("p", { class: "problem", role: "alert", "data-testid": "approval-error" });
    error.hidden = true;
    const node = h(
      "li",
      { class: "card", "data-testid": "approval", "data-approval-id": approval.id },
      summary(approval),
      h("p", { class: "why", "data-testid": "approval-reason" }, ...marked(approval.reason || "(no reason given)")),
      h("dl", { class: "context", "data-testid": "approval-context" }, ...rows),
      h("h4", {}, "Arguments"),
      redactionSummary(argumentsText),
      h("pre", { class: "arguments", "data-testid": "approval-arguments" }, ...marked(argumentsText)),
      h(
        "div",
        { class: "decide" },
        h("label", { for: reasonId }, `Reason for approving or denying ${name}`),
        reasonBox,
        h("div", { class: "buttons" }, approveButton, denyButton),
      ),
      error,
    );
    const card = { node, name, reasonBox, approveButton, denyButton, error, expiry };
    approveButton.addEventListener("click", () => decide(approval.id, card, "approve"));
    denyButton.addEventListener("click", () => decide(approval.id, card, "deny"));
    return card;
  }

  // -- recently decided ---------------------------------------------------------------

  /** When an approval left the queue: its decision, or (expired undecided) its expiry. */
  function closedAt(approval) {
    return approval.decided_us ?? approval.expires_us;
  }

  function renderClosed(approvals) {
    const latest = approvals
      .map((approval) => ({ approval, at: closedAt(approval) }))
      .sort((one, other) => other.at - one.at)
      .slice(0, RECENT_SHOWN);
    const wanted = new Set(latest.map(({ approval }) => approval.id));
    for (const id of [...closed.keys()]) if (!wanted.has(id)) removeClosed(id);
    latest.forEach(({ approval, at }, index) => {
      // An item is rebuilt only when its approval changed (approved, then used or
      // expired), its arguments left open if they were; otherwise only "… ago" moves on.
      const version = `${approval.status} ${approval.decided_us} ${approval.claimed_us}`;
      let item = closed.get(approval.id);
      const open = item !== undefined && item.details.open;
      if (item !== undefined && item.version !== version) {
        removeClosed(approval.id);
        item = undefined;
      }
      if (item === undefined) {
        item = buildClosed(approval, version, at);
        item.details.open = open;
        closed.set(approval.id, item);
      }
      item.ago.textContent = ` (${ago(at)})`;
      const here = ui.decided.children[index] ?? null;
      if (here !== item.node) ui.decided.insertBefore(item.node, here);
    });
    ui.recentEmpty.hidden = closed.size > 0;
  }

  function removeClosed(id) {
    const item = closed.get(id);
    if (item === undefined) return;
    item.node.remove();
    closed.delete(id);
    ui.recentEmpty.hidden = closed.size > 0;
  }

  /** Who closed it, spelled out: "by alice", or how it expired. */
  function closedBy(approval) {
    const by = (name) => h("span", { class: "by", "data-testid": "decided-by" }, name);
    if (approval.status !== "expired") {
      return approval.decided_by ? [" by ", by(approval.decided_by)] : [];
    }
    if (approval.decided_by) return [": approved by ", by(approval.decided_by), ", never used"];
    return [": no one decided it in time"];
  }

  /** One approval of "Recently decided": the call, how it ended, who, why and when. */
  function buildClosed(approval, version, at) {
    const status = STATUS_LABELS.has(approval.status) ? approval.status : "other";
    const label = STATUS_LABELS.get(status) ?? display(approval.status);
    const since = h("span", { "data-testid": "decided-ago" });
    const undecided = approval.decided_us === null || approval.decided_us === undefined;
    const reason = approval.decision_reason ?? "";
    const argumentsText = JSON.stringify((approval.action ?? {}).arguments ?? {}, null, 2);
    const details = h(
      "details",
      {},
      h("summary", {}, "Arguments"),
      redactionSummary(argumentsText),
      h("pre", { class: "arguments", "data-testid": "approval-arguments" }, ...marked(argumentsText)),
    );
    const node = h(
      "li",
      { class: "card closed", "data-testid": "decided", "data-approval-id": approval.id },
      summary(approval),
      h(
        "p",
        { class: "outcome" },
        h("strong", { class: `status ${status}`, "data-testid": "decided-status" }, label),
        ...closedBy(approval),
        " · ",
        h("span", { "data-testid": "decided-when" }, timeOf(at), since),
      ),
      undecided
        ? null
        : h(
            "p",
            { class: "decision-reason" },
            "Reason: ",
            reason === ""
              ? h("span", { class: "hint", "data-testid": "decided-reason" }, "(no reason given)")
              : h("q", { "data-testid": "decided-reason" }, ...marked(reason)),
          ),
      details,
    );
    return { node, version, details, ago: since };
  }

  // -- deciding -----------------------------------------------------------------------

  async function decide(id, card, verdict) {
    const generation = session.generation;
    card.approveButton.disabled = true;
    card.denyButton.disabled = true;
    hide(card.error);
    const label = `${card.name} (${id})`;
    try {
      await api("POST", `approvals/${encodeURIComponent(id)}/${verdict}`, {
        body: { reason: card.reasonBox.value },
      });
      if (generation !== session.generation) return;
      gone.add(id);
      removeCard(id);
      notice(`${verdict === "approve" ? "Approved" : "Denied"} ${label}.`, "ok");
    } catch (failure) {
      if (generation !== session.generation) return;
      if (failure.status === 401) {
        stop(`Signed out: ${failure.message}.`);
        return;
      }
      if (failure.status === 409 || failure.status === 404) {
        gone.add(id);
        removeCard(id);
        const what = failure.status === 409 ? "was already decided" : "no longer exists";
        notice(`${label} ${what}: ${failure.message}.`, "warn");
        return;
      }
      let text = `The decision was not recorded: ${failure.message}.`;
      if (failure.code === "self_approval") {
        text = `You cannot decide a request you made yourself: ${failure.message}.`;
      } else if (failure.status === 403) {
        text = `This key may not decide approvals: ${failure.message}.`;
      }
      show(card.error, text);
      card.approveButton.disabled = false;
      card.denyButton.disabled = false;
    }
  }

  // -- start --------------------------------------------------------------------------

  /** Mark, show and focus the card the fragment names, once it is listed. */
  function focusLinked() {
    const target = linked === null ? undefined : cards.get(linked);
    if (target === undefined) return;
    linked = null;
    target.node.classList.add("linked");
    target.node.scrollIntoView({ block: "start" });
    target.reasonBox.focus({ preventScroll: true });
  }

  function followFragment() {
    let id = "";
    try {
      id = decodeURIComponent(window.location.hash.slice(1));
    } catch {
      id = "";
    }
    linked = id === "" ? null : id;
    for (const card of cards.values()) card.node.classList.remove("linked");
    focusLinked();
  }

  ui.form.addEventListener("submit", onSubmit);
  window.addEventListener("hashchange", followFragment);
  followFragment();
  ui.signOut.addEventListener("click", () => stop(null));

  const saved = sessionStorage.getItem(KEY_SLOT);
  if (saved) {
    signIn(saved).then(
      (who) => start(saved, who),
      (failure) => stop(signInProblem(failure)),
    );
  } else {
    ui.keyInput.focus();
  }
})();
