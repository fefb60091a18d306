// The Interlock approvals page: sign in with an API key, watch the tenant's pending
// approvals — the tool, what it is said to do, its declared risk, the exact call and
// what approving grants — approve or deny each with a reason (a high or critical one
// after a confirmation), and page through the history of decisions (who, when, why).
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
  // The history shows HISTORY_PAGE decided approvals a page, newest decision first, as
  // the server orders them (GET /v1/approvals/history); its first page follows the
  // server live, an older page stays as it was read.
  const HISTORY_PAGE = 20;
  // Severities whose approval asks the approver to confirm it.
  const CONFIRMED = new Set(["high", "critical"]);
  const SEVERITY_LABELS = new Map([
    ["low", "Low risk"],
    ["medium", "Medium risk"],
    ["high", "High risk"],
    ["critical", "Critical risk"],
  ]);
  // Local time with its zone ("Dec 3, 2026, 7:28:05 AM EST"); each <time> also carries
  // the instant in ISO 8601 UTC, in its datetime attribute and its tooltip.
  const LOCAL_TIME = new Intl.DateTimeFormat(undefined, {
    dateStyle: "medium",
    timeStyle: "long",
  });
  // What the server does not count as a reason: blank space and invisible characters
  // (it checks again: it is the one that refuses).
  const BLANK = /[\s\p{Cf}\p{Z}\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0]/gu;
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
    historyPage: byId("history-page"),
    newer: byId("history-newer"),
    older: byId("history-older"),
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
  const closed = new Map(); // approval id -> item of the history (see buildClosed)
  // The history's paging: `befores[n]` is the cursor page n is read from (null: the
  // newest); `next` the cursor of the page after the one shown.
  const history = { page: 0, befores: [null], next: null, loading: false };
  let reasonRequired = true; // what the server said at the last poll
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

  /** A time as the reader's local time with its zone; the exact instant in UTC (ISO
   * 8601) is its datetime and its tooltip. */
  function timeOf(microseconds) {
    const when = new Date(Math.floor(microseconds / 1000));
    const iso = when.toISOString();
    return h("time", { datetime: iso, title: `${iso} (UTC)` }, LOCAL_TIME.format(when));
  }

  function duration(microseconds) {
    const minutes = Math.round(microseconds / 60_000_000);
    if (minutes < 1) return `${Math.round(microseconds / 1_000_000)} s`;
    if (minutes < 120) return `${minutes} min`;
    const hours = Math.round(minutes / 60);
    return hours < 48 ? `${hours} h` : `${Math.round(hours / 24)} d`;
  }

  function isBlank(text) {
    return String(text).replace(BLANK, "") === "";
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
    resetHistory();
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
    resetHistory();
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
      // Two requests, sent together (one round trip): the queue, and the newest page
      // of the history (what was decided last, by anyone).
      const [pending, latest] = await Promise.all([
        api("GET", `approvals?status=pending&limit=${PAGE_SIZE}`),
        api("GET", `approvals/history?limit=${HISTORY_PAGE}`),
      ]);
      if (generation !== session.generation) return;
      reasonRequired = pending.reason_required !== false;
      render(pending.approvals, new Set(latest.approvals.map((approval) => approval.id)));
      if (history.page === 0 && !history.loading) renderHistory(latest);
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
      card.grants.replaceChildren(...grantText(approval));
      card.reasonLabel.textContent = reasonRequired ? " (required)" : " (optional)";
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
      severityBadge(approval.severity),
      h("span", { class: "id", "data-testid": "approval-id" }, approval.id),
    );
  }

  /** The declared risk, in words (the colour only repeats them). */
  function severityBadge(severity) {
    const known = SEVERITY_LABELS.has(severity);
    return h(
      "span",
      {
        class: `severity ${known ? severity : "none"}`,
        "data-testid": "approval-severity",
        "data-severity": known ? severity : "",
        title: known
          ? "The severity the policy's rules declare for this call"
          : "The policy's rules declare no severity for this call",
      },
      known ? SEVERITY_LABELS.get(severity) : "Risk not declared",
    );
  }

  /** What the tool is said to do, and who says so: the policy, or the agent itself. */
  function describedTool(approval) {
    const text = approval.tool_description;
    if (typeof text !== "string" || text === "") {
      return h(
        "p",
        { class: "tool-description none", "data-testid": "tool-description" },
        "No description of this tool was declared.",
      );
    }
    const byAgent = approval.tool_description_from === "agent";
    return h(
      "p",
      { class: "tool-description", "data-testid": "tool-description" },
      h("span", { "data-testid": "tool-description-text" }, ...marked(text)),
      h(
        "span",
        { class: `source ${byAgent ? "agent" : "policy"}`, "data-testid": "tool-description-source" },
        byAgent
          ? " — as the agent's framework describes it (the agent's own words, not checked)"
          : " — as the policy describes it",
      ),
    );
  }

  /** "this identical call, once, until <time>": what approving it now would grant. */
  function grantText(approval) {
    const ttl = approval.grant_ttl_us;
    if (typeof ttl !== "number") return ["this identical call (same tool, same arguments), once."];
    return [
      "this identical call (same tool, same arguments), once, until ",
      timeOf(Date.now() * 1000 + ttl),
      ` if you approve it now (${duration(ttl)} after the approval). A changed argument is another call.`,
    ];
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
    const grants = h("span", { "data-testid": "approval-grants-text" }, ...grantText(approval));
    const reasonLabel = h("span", { class: "hint" }, reasonRequired ? " (required)" : " (optional)");
    const severity = SEVERITY_LABELS.has(approval.severity) ? approval.severity : null;
    const confirmButton = h(
      "button",
      { type: "button", class: "approve", "data-testid": "confirm-approve" },
      "Confirm approval",
    );
    const cancelButton = h("button", { type: "button", "data-testid": "confirm-cancel" }, "Cancel");
    const confirm = h(
      "div",
      { class: `confirm ${severity ?? ""}`, role: "alertdialog", "data-testid": "confirm" },
      h(
        "p",
        { "data-testid": "confirm-text" },
        `${name} is marked ${severity ?? ""} risk by the policy. Approving lets this exact call run once. Approve it?`,
      ),
      h("div", { class: "buttons" }, confirmButton, cancelButton),
    );
    confirm.hidden = true;
    const node = h(
      "li",
      { class: `card${severity ? ` severity-${severity}` : ""}`, "data-testid": "approval", "data-approval-id": approval.id },
      summary(approval),
      describedTool(approval),
      h("p", { class: "why", "data-testid": "approval-reason" }, ...marked(approval.reason || "(no reason given)")),
      h("dl", { class: "context", "data-testid": "approval-context" }, ...rows),
      h("h4", {}, "Arguments"),
      redactionSummary(argumentsText),
      h("pre", { class: "arguments", "data-testid": "approval-arguments" }, ...marked(argumentsText)),
      h("p", { class: "grants", "data-testid": "approval-grants" }, h("strong", {}, "Approving grants: "), grants),
      h(
        "div",
        { class: "decide" },
        h("label", { for: reasonId }, `Reason for approving or denying ${name}`, reasonLabel),
        reasonBox,
        h("div", { class: "buttons" }, approveButton, denyButton),
      ),
      confirm,
      error,
    );
    const card = {
      node, name, reasonBox, approveButton, denyButton, error, expiry, grants, reasonLabel,
      severity, confirm, confirmButton, cancelButton,
    };
    approveButton.addEventListener("click", () => {
      if (!reasonGiven(card, "approve")) return;
      if (severity !== null && CONFIRMED.has(severity)) {
        card.confirm.hidden = false;
        card.approveButton.disabled = true;
        card.confirmButton.focus();
        return;
      }
      decide(approval.id, card, "approve");
    });
    confirmButton.addEventListener("click", () => {
      card.confirm.hidden = true;
      if (reasonGiven(card, "approve")) decide(approval.id, card, "approve");
      else card.approveButton.disabled = false;
    });
    cancelButton.addEventListener("click", () => {
      card.confirm.hidden = true;
      card.approveButton.disabled = false;
      card.approveButton.focus();
    });
    denyButton.addEventListener("click", () => {
      card.confirm.hidden = true;
      if (reasonGiven(card, "deny")) decide(approval.id, card, "deny");
    });
    return card;
  }

  /** Whether the card's reason will do: when the server requires one, a blank reason
   * is refused here, before anything is sent (and the server refuses it again). */
  function reasonGiven(card, verdict) {
    if (!reasonRequired || !isBlank(card.reasonBox.value)) return true;
    show(
      card.error,
      `Give a reason before you ${verdict} ${card.name}: it is kept with the decision and in the audit log.`,
    );
    card.reasonBox.setAttribute("aria-invalid", "true");
    card.reasonBox.focus();
    return false;
  }

  // -- the history of decisions -------------------------------------------------------

  /** When an approval left the queue: its decision, or (expired undecided) its expiry. */
  function closedAt(approval) {
    return approval.decided_us ?? approval.expires_us;
  }

  function resetHistory() {
    history.page = 0;
    history.befores = [null];
    history.next = null;
    history.loading = false;
    ui.historyPage.textContent = "Newest decisions";
    ui.newer.disabled = true;
    ui.older.disabled = true;
  }

  /** One page of the history, as the server ordered it (newest decision first). */
  function renderHistory(answer) {
    history.next = typeof answer.next === "string" ? answer.next : null;
    if (history.next !== null) history.befores[history.page + 1] = history.next;
    ui.older.disabled = history.next === null;
    ui.newer.disabled = history.page === 0;
    ui.historyPage.textContent =
      history.page === 0 ? "Newest decisions" : `Page ${history.page + 1} (older decisions)`;
    renderClosed(answer.approvals);
  }

  /** Show page ``page`` of the history (0: the newest, which then follows the server). */
  async function turnHistory(page) {
    const generation = session.generation;
    const before = history.befores[page];
    if (page < 0 || before === undefined || history.loading) return;
    history.loading = true;
    ui.older.disabled = true;
    ui.newer.disabled = true;
    const query = before === null ? "" : `&before=${encodeURIComponent(before)}`;
    try {
      const answer = await api("GET", `approvals/history?limit=${HISTORY_PAGE}${query}`);
      if (generation !== session.generation) return;
      history.page = page;
      history.loading = false;
      renderHistory(answer);
    } catch (failure) {
      if (generation !== session.generation) return;
      history.loading = false;
      if (failure.status === 401 || failure.status === 403) {
        stop(`Signed out: ${failure.message}.`);
        return;
      }
      notice(`The history could not be read: ${failure.message}.`, "warn");
      ui.older.disabled = history.next === null;
      ui.newer.disabled = history.page === 0;
    }
  }

  function renderClosed(approvals) {
    const latest = approvals.map((approval) => ({ approval, at: closedAt(approval) }));
    const wanted = new Set(latest.map(({ approval }) => approval.id));
    for (const id of [...closed.keys()]) if (!wanted.has(id)) removeClosed(id);
    latest.forEach(({ approval, at }, index) => {
      // An item is rebuilt only when its approval changed (approved, then used or
      // expired), its arguments left open if they were; otherwise only "… ago" moves on.
      const version = `${approval.status} ${approval.decided_us} ${approval.claimed_us} ${history.page}`;
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

  /** One approval of the history: the call, how it ended, who, why and when. */
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
        { class: "requested" },
        "Requested by ",
        h("span", { "data-testid": "requested-by" }, display(approval.requested_by ?? "(unknown)")),
        " · ",
        timeOf(approval.created_us),
      ),
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
      if (failure.status === 422) {
        text = `The decision was not recorded: ${sentence(failure.message)}`;
        card.reasonBox.setAttribute("aria-invalid", "true");
      } else if (failure.code === "self_approval") {
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
  ui.older.addEventListener("click", () => turnHistory(history.page + 1));
  ui.newer.addEventListener("click", () => turnHistory(history.page - 1));

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
