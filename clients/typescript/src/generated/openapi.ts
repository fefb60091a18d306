// Generated from the Interlock server's OpenAPI document by `npm run gen:types`.
// Do not edit: `npm run check:types` fails the build when this file is stale.

export interface paths {
    "/v1/approvals": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * List Approvals
         * @description The tenant's approvals, newest first (default: the pending ones).
         */
        get: operations["list_approvals_v1_approvals_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/approvals/{approval_id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Get Approval
         * @description One approval: the call (redacted), its context, its state.
         */
        get: operations["get_approval_v1_approvals__approval_id__get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/approvals/{approval_id}/approve": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Approve
         * @description Approve a pending request: the identical call, retried, may run once, until the
         *     policy's `grant_ttl` has passed. A reason is required unless the server says not.
         */
        post: operations["approve_v1_approvals__approval_id__approve_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/approvals/{approval_id}/deny": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Deny
         * @description Deny a pending request: the identical call is denied until the denial lapses.
         *     A reason is required unless the server says not.
         */
        post: operations["deny_v1_approvals__approval_id__deny_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/approvals/{approval_id}/wait": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Wait For Approval
         * @description Long-poll: answer as soon as the approval is decided, or when ``timeout``
         *     passes, with the record as it then stands (still ``pending`` on a timeout).
         */
        get: operations["wait_for_approval_v1_approvals__approval_id__wait_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/approvals/history": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Approval History
         * @description The tenant's decided approvals — approved, used (`claimed`), denied or expired —
         *     newest first by when they left the queue, with who decided each, when and why.
         */
        get: operations["approval_history_v1_approvals_history_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/audit": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Query Audit
         * @description Records of the tenant's chain in order, after ``since_seq``, matching every
         *     filter given; page on with ``next_since_seq``.
         */
        get: operations["query_audit_v1_audit_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/audit/export": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Export Audit
         * @description Every matching record as JSON lines, oldest first, streamed page by page (a log
         *     of any size is never held in memory).
         */
        get: operations["export_audit_v1_audit_export_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/audit/replay": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Replay Audit
         * @description Re-decide the tenant's recorded calls under the draft policy in the body, with
         *     the pure engine (no approvals, budgets or rate limits are touched; nothing is
         *     written), and answer what would change: loosenings, tightenings, approvals added or
         *     removed, the calls whose verdict cannot be told from their redacted record, counts
         *     per rule, the rules the draft never fires, and example calls.
         */
        post: operations["replay_audit_v1_audit_replay_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/audit/verify": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Verify Audit
         * @description Walk the tenant's hash chain; name the first broken link.
         */
        get: operations["verify_audit_v1_audit_verify_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/budgets": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Budget Status
         * @description The tenant's budget counters: cap, spent, reserved, headroom held for overruns,
         *     available, overage, excess, and whether an overrun closed them.
         */
        get: operations["budget_status_v1_budgets_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/budgets/commit": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Commit
         * @description Spend a reservation: the real usage is charged in full, whatever was reserved;
         *     past the reservation and its max_overage it is excess, and closes the budget.
         *     Committing twice changes nothing. Another key's reservation is a 403.
         */
        post: operations["commit_v1_budgets_commit_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/budgets/release": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Release
         * @description Give a reservation back: the call did not run (releasing twice changes nothing).
         *     Another key's reservation is a 403.
         */
        post: operations["release_v1_budgets_release_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/budgets/reopen": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Reopen
         * @description Reopen a budget of the tenant that an overrun closed (one scope key, or all of
         *     the budget's): it admits reservations again (its counters keep what they spent).
         *     Admin keys only; audited.
         */
        post: operations["reopen_v1_budgets_reopen_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/budgets/reserve": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Reserve
         * @description Reserve on every line or on none. A budget that cannot take its line refuses
         *     the whole reservation (``reserved: false``, with the numbers); that is a 200.
         */
        post: operations["reserve_v1_budgets_reserve_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/check": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Check
         * @description Decide one action: allow, deny, require_approval or undetermined (which fails
         *     closed). Every verdict is a 200; the decision is in the body.
         */
        post: operations["check_v1_check_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/check/batch": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Check Batch
         * @description Decide an ordered list of actions that together make one call: the first
         *     verdict that is not allow halts it and is returned; else the last allow is.
         */
        post: operations["check_batch_v1_check_batch_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/grants": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Issue
         * @description A signed, single-use grant for an allow this server decided for this key.
         */
        post: operations["issue_v1_grants_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/grants/claim": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Claim
         * @description Claim a grant of this key's tenant, exactly once.
         */
        post: operations["claim_v1_grants_claim_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/health": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Health
         * @description Liveness: the process answers. No key needed.
         */
        get: operations["health_v1_health_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/keys/jwks.json": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Jwks
         * @description The public JWK set of the grant signing keys: the active key and the retired
         *     ones whose grants may not have expired. No API key needed.
         */
        get: operations["jwks_v1_keys_jwks_json_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/policy/reload/confirm": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Confirm Reload
         * @description Apply the held reload of the policy file whose digest is ``sha256`` (as
         *     ``/v1/ready`` shows it in ``policy_reload_held``). ``409`` when no reload is held,
         *     or the held one is another version of the file; ``404`` when this server reloads
         *     no policy file.
         */
        post: operations["confirm_reload_v1_policy_reload_confirm_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/ready": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Ready
         * @description Readiness: the store answers and a policy is loaded. No key needed.
         *     ``checks.policy_reload`` reports a policy file that failed to reload, or a reload
         *     held for confirmation (then also ``policy_reload_held``); either way the server
         *     stays ready, serving the policy in force.
         */
        get: operations["ready_v1_ready_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sessions/input": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Record Input
         * @description Record outside data entering the session (its fingerprints).
         */
        post: operations["record_input_v1_sessions_input_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sessions/outcome": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Record Outcome
         * @description Settle the session step of a decided call: ran or not, its result's
         *     fingerprints (computed by the agent), labels its result carries.
         */
        post: operations["record_outcome_v1_sessions_outcome_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/whoami": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Whoami
         * @description The key the request carries: its id, tenant, role and name.
         */
        get: operations["whoami_v1_whoami_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        /**
         * ActionIn
         * @description One action, as :class:`interlock.Action` has it (without the trusted fields).
         */
        ActionIn: {
            /** Arguments */
            arguments?: {
                [key: string]: unknown;
            };
            /** Capabilities */
            capabilities?: string[];
            context?: components["schemas"]["ContextIn"];
            /** Description */
            description?: string | null;
            /**
             * Kind
             * @default tool
             * @enum {string}
             */
            kind?: "tool" | "llm" | "mcp" | "browser" | "effect";
            /** Name */
            name: string;
            /**
             * Schema
             * @description The tool's declared JSON Schema of its parameters.
             */
            schema?: {
                [key: string]: unknown;
            } | null;
            /** Scope */
            scope?: string | null;
            /** Target */
            target?: string | null;
            /**
             * Unreadable
             * @description Set by a client that could not read the call it was asked to judge (a malformed request at a gateway): the server records it as undetermined, naming this problem, and decides nothing.
             */
            unreadable?: string | null;
        };
        /** AmountOut */
        AmountOut: {
            /** Amount */
            amount: number;
            /** Budget Id */
            budget_id: string;
            /** Unit */
            unit: string;
        };
        /**
         * ApprovalHistory
         * @description A page of the approvals that left the queue, newest first by when they left it
         *     (the decision; for one that expired undecided, its expiry).
         */
        ApprovalHistory: {
            /** Approvals */
            approvals: components["schemas"]["ApprovalOut"][];
            /**
             * Next
             * @description Pass as `before` for the next (older) page; null: this is the last.
             */
            next: string | null;
            /** Reason Required */
            reason_required: boolean;
        };
        /** ApprovalList */
        ApprovalList: {
            /** Approvals */
            approvals: components["schemas"]["ApprovalOut"][];
            /**
             * Reason Required
             * @description Whether this server refuses a decision without a reason.
             * @default true
             */
            reason_required?: boolean;
        };
        /**
         * ApprovalOut
         * @description One approval request, bound to one intent hash. ``requested_by`` is the name of
         *     the key whose check opened it; ``decided_by`` the name of the key that decided.
         *     Approving grants this identical call, once, until ``decided_us + grant_ttl_us``
         *     (for a pending one: that long after the approval).
         */
        ApprovalOut: {
            /** Action */
            action: {
                [key: string]: unknown;
            };
            /** Claimed Us */
            claimed_us: number | null;
            /** Context */
            context: {
                [key: string]: unknown;
            };
            /** Created Us */
            created_us: number;
            /** Decided By */
            decided_by: string | null;
            /** Decided Us */
            decided_us: number | null;
            /** Decision Reason */
            decision_reason: string | null;
            /** Expires Us */
            expires_us: number;
            /**
             * Grant Ttl Us
             * @description How long an approval stays claimable by the identical call (a denial, in force), in microseconds from the decision.
             */
            grant_ttl_us?: number | null;
            /** Id */
            id: string;
            /** Intent Hash */
            intent_hash: string;
            /** Reason */
            reason: string;
            /** Requested By */
            requested_by: string | null;
            /** Rule Ids */
            rule_ids: string[];
            /**
             * Severity
             * @description The highest severity the rules that asked for it declare.
             */
            severity?: ("low" | "medium" | "high" | "critical") | null;
            /**
             * Status
             * @enum {string}
             */
            status: "pending" | "approved" | "denied" | "expired" | "claimed";
            /** Tenant */
            tenant: string;
            /**
             * Tool Description
             * @description What the tool is said to do (redacted), if anyone says.
             */
            tool_description?: string | null;
            /**
             * Tool Description From
             * @description Who says so: the policy's `tools` section, or the agent's framework (the agent's own claim).
             */
            tool_description_from?: ("policy" | "agent") | null;
        };
        /** ApprovalRefOut */
        ApprovalRefOut: {
            /** Id */
            id: string | null;
            /** Status */
            status: string | null;
            /** Url */
            url: string | null;
        };
        /**
         * AuditPage
         * @description Records in chain order. ``next_since_seq`` continues after the last one (pass
         *     it as ``since_seq``); ``null`` when this page is the end.
         */
        AuditPage: {
            /** Next Since Seq */
            next_since_seq: number | null;
            /** Records */
            records: components["schemas"]["AuditRecordOut"][];
            /** Tenant */
            tenant: string;
        };
        /**
         * AuditRecordOut
         * @description One link of the tenant's hash chain; ``record`` is the redacted body, parsed.
         */
        AuditRecordOut: {
            /** Agent */
            agent: string | null;
            /** Decision */
            decision: string | null;
            /** Decision Id */
            decision_id: string | null;
            /** Hash */
            hash: string;
            /** Kind */
            kind: string;
            /** Prev Hash */
            prev_hash: string;
            /** Record */
            record: unknown;
            /** Seq */
            seq: number;
            /** Tenant */
            tenant: string;
            /** Ts Us */
            ts_us: number;
        };
        /**
         * BatchIn
         * @description Actions that together make one call: the first that is not allowed halts it.
         */
        BatchIn: {
            /** Actions */
            actions: components["schemas"]["ActionIn"][];
        };
        /** BudgetLineOut */
        BudgetLineOut: {
            /** Amount */
            amount: number;
            /** Budget Id */
            budget_id: string;
            /** Cap */
            cap: number;
            /**
             * Headroom
             * @description Held besides the amount, for the call's overrun.
             */
            headroom: number;
            /** Scope Key */
            scope_key: string;
            /** Unit */
            unit: string;
            /** Window Start */
            window_start: number;
        };
        /** BudgetList */
        BudgetList: {
            /** Budgets */
            budgets: components["schemas"]["BudgetRowOut"][];
            /** Tenant */
            tenant: string;
        };
        /** BudgetRowOut */
        BudgetRowOut: {
            /** Available */
            available: number;
            /** Budget Id */
            budget_id: string;
            /** Cap */
            cap: number;
            /**
             * Closed
             * @description Closed by an excess until an admin reopens it.
             */
            closed: boolean;
            /** Closed Us */
            closed_us: number | null;
            /**
             * Excess
             * @description Charged beyond reservations and their max_overage.
             */
            excess: number;
            /**
             * Headroom
             * @description Held for the overruns of the calls in flight.
             */
            headroom: number;
            /**
             * Overage
             * @description Charged beyond reservations.
             */
            overage: number;
            /** Reserved */
            reserved: number;
            /** Scope Key */
            scope_key: string;
            /** Spent */
            spent: number;
            /** Unit */
            unit: string;
            /** Updated Us */
            updated_us: number;
            /** Window Start */
            window_start: number;
        };
        /**
         * CallIn
         * @description The call an untrusted input is the result of.
         */
        CallIn: {
            /**
             * Arguments
             * @description Its arguments: an object, or the JSON text a model wrote. Anything else gets every label the policy's label rules could attach to a call of the tool.
             */
            arguments?: unknown;
            /**
             * Name
             * @description The tool's name.
             */
            name: string;
        };
        /** ChainBreakOut */
        ChainBreakOut: {
            /** Problem */
            problem: string;
            /** Seq */
            seq: number;
        };
        /** ClaimIn */
        ClaimIn: {
            /** Token */
            token: string;
        };
        /** ClosureOut */
        ClosureOut: {
            /** Budget Id */
            budget_id: string;
            /** Closed Us */
            closed_us: number;
            /** Excess */
            excess: number;
            /**
             * Reservation Id
             * @description The reservation whose commit closed it.
             */
            reservation_id: string;
            /** Scope Key */
            scope_key: string;
        };
        /**
         * CommitIn
         * @description Spend a reservation: what was reserved, or — given ``usage`` — what a call to
         *     ``model`` really used (priced by the policy for currency budgets), charged in full
         *     whatever was reserved. Only the key that made the reservation (its name), or an
         *     admin key, may commit it.
         */
        CommitIn: {
            /** Model */
            model?: string | null;
            /** Reservation Id */
            reservation_id: string;
            usage?: components["schemas"]["UsageIn"] | null;
        };
        /** ConfirmReloadIn */
        ConfirmReloadIn: {
            /**
             * Sha256
             * @description The digest of the held file, as `/v1/ready` shows it.
             */
            sha256: string;
        };
        /**
         * ContextIn
         * @description The context fields a caller may state. ``tenant`` and ``agent`` are not among
         *     them: they come from the API key.
         */
        ContextIn: {
            /** Agent Type */
            agent_type?: string | null;
            /** Call Id */
            call_id?: string | null;
            downstream?: components["schemas"]["DownstreamIn"] | null;
            /** Idempotency Key */
            idempotency_key?: string | null;
            /** Run Id */
            run_id?: string | null;
            /** Runtime */
            runtime?: string | null;
            /** Session Id */
            session_id?: string | null;
        };
        /** DecideIn */
        DecideIn: {
            /**
             * Reason
             * @description Why; kept with the decision and in the audit log. Required (not blank) unless the server runs with the reason optional: a blank one is then a 422 `invalid_request` naming the field `reason`.
             * @default
             */
            reason?: string;
        };
        /**
         * DecisionOut
         * @description A verdict. ``approval`` is set for a call that needs (or used) an approval;
         *     ``reservation`` for an allowed call that holds budget (settle it with
         *     ``/v1/budgets/commit`` or ``/v1/budgets/release``); ``cause`` for undetermined;
         *     ``grant`` for an allow the policy asks a grant for (claim it with
         *     ``/v1/grants/claim``; verify it with ``/v1/keys/jwks.json``).
         */
        DecisionOut: {
            approval?: components["schemas"]["ApprovalRefOut"] | null;
            /** Cause */
            cause?: string | null;
            /** Decision Id */
            decision_id: string;
            /**
             * Fail Open
             * @default false
             */
            fail_open?: boolean;
            grant?: components["schemas"]["GrantOut"] | null;
            /** Reason */
            reason: string;
            reservation?: components["schemas"]["ReservationRefOut"] | null;
            /** Rule Ids */
            rule_ids: string[];
            shadow?: components["schemas"]["ShadowOut"] | null;
            /**
             * Verdict
             * @enum {string}
             */
            verdict: "allow" | "deny" | "require_approval" | "undetermined";
        };
        /** DownstreamIn */
        DownstreamIn: {
            /** Endpoint */
            endpoint?: string | null;
            /** Operation */
            operation?: string | null;
            /** System */
            system: string;
        };
        /** ErrorBody */
        ErrorBody: {
            /**
             * Code
             * @description Stable, machine-readable: unauthorized, not_found, ...
             */
            code: string;
            /**
             * Field
             * @description The request field at fault, if one is.
             */
            field?: string | null;
            /** Message */
            message: string;
        };
        /** ErrorOut */
        ErrorOut: {
            error: components["schemas"]["ErrorBody"];
        };
        /**
         * GrantClaimsOut
         * @description What a grant says (``interlock.verify.tokens.GrantClaims``).
         */
        GrantClaimsOut: {
            /** Agent */
            agent: string | null;
            /** Audience */
            audience: string;
            /** Binding */
            binding: string | null;
            /** Expires At */
            expires_at: number;
            /** Grant Id */
            grant_id: string;
            /** Intent Hash */
            intent_hash: string;
            /** Issued At */
            issued_at: number;
            /** Issuer */
            issuer: string;
            /** Tenant */
            tenant: string;
        };
        /**
         * GrantOut
         * @description An issued grant: the token to send downstream, what it says, its key's id.
         */
        GrantOut: {
            claims: components["schemas"]["GrantClaimsOut"];
            /** Kid */
            kid: string;
            /** Token */
            token: string;
        };
        /** HealthOut */
        HealthOut: {
            /**
             * Status
             * @constant
             */
            status: "ok";
        };
        /**
         * HeldReloadOut
         * @description A policy reload held for confirmation: the file's digest, how many rules serve,
         *     how many the file has, how many it would remove, and since when (epoch
         *     seconds).
         */
        HeldReloadOut: {
            /** Held Since */
            held_since: number;
            /** New Rules */
            new_rules: number;
            /** Reason */
            reason: string;
            /** Removed Rules */
            removed_rules: number;
            /** Serving Rules */
            serving_rules: number;
            /** Sha256 */
            sha256: string;
        };
        /**
         * InputIn
         * @description Outside data entering a session, as its fingerprints.
         */
        InputIn: {
            /**
             * Fingerprints
             * @description base64 of the input's fingerprints, packed sorted little-endian uint64.
             * @default
             */
            fingerprints?: string;
            /** Labels */
            labels?: string[];
            /** Session Id */
            session_id: string;
            /** @description An untrusted input that is a tool's result: the call it answers. The server adds the labels its policy gives an allowed call of that tool with those arguments (a result whose call this server did not decide, or cannot match). */
            tool?: components["schemas"]["CallIn"] | null;
            /**
             * Trusted
             * @description Required: true for the user's request or the operator's prompt (a value they hold counts as the user's), false for an inbound message.
             */
            trusted: boolean;
        };
        /** IssueIn */
        IssueIn: {
            /** Audience */
            audience?: string | null;
            /** Binding */
            binding?: string | null;
            /** Decision Id */
            decision_id: string;
            /** Ttl */
            ttl?: number | null;
        };
        /**
         * OutcomeIn
         * @description The outcome of a call this server decided.
         */
        OutcomeIn: {
            /**
             * Decision Id
             * @description From /v1/check.
             */
            decision_id: string;
            /**
             * Executed
             * @description Whether the call ran (false: it raised).
             */
            executed: boolean;
            /**
             * Fingerprints
             * @description base64 of the result's fingerprints, packed sorted little-endian uint64.
             * @default
             */
            fingerprints?: string;
            /** Labels */
            labels?: string[];
            /** Session Id */
            session_id: string;
        };
        /**
         * PolicyReloadOut
         * @description The policy serving after a confirmed reload.
         */
        PolicyReloadOut: {
            /** Rules */
            rules: number;
            /** Serving Sha256 */
            serving_sha256: string;
        };
        /**
         * ReadyOut
         * @description ``checks`` names each check and its outcome (``ok`` or why not).
         *     ``policy_reload_held`` is set while a reload of the policy file waits for
         *     confirmation: the old policy serves, and the server stays ready.
         */
        ReadyOut: {
            /** Checks */
            checks: {
                [key: string]: string;
            };
            policy_reload_held?: components["schemas"]["HeldReloadOut"] | null;
            /**
             * Status
             * @enum {string}
             */
            status: "ready" | "unavailable";
        };
        /** RecordedOut */
        RecordedOut: {
            /**
             * Recorded
             * @description False when the server's policy reads no sessions, or (an outcome) the session holds no step of that decision.
             */
            recorded: boolean;
            /**
             * Seq
             * @description The input's step number in its session.
             */
            seq?: number | null;
        };
        /** RefusalOut */
        RefusalOut: {
            /** Amount */
            amount: number;
            /** Available */
            available: number;
            /** Budget Id */
            budget_id: string;
            /** Cap */
            cap: number;
            /**
             * Closed
             * @description The budget is closed until an admin reopens it.
             */
            closed: boolean;
            /** Reason */
            reason: string;
            /** Reserved */
            reserved: number;
            /** Scope Key */
            scope_key: string;
            /** Spent */
            spent: number;
            /** Unit */
            unit: string;
        };
        /** ReleaseIn */
        ReleaseIn: {
            /** Reservation Id */
            reservation_id: string;
        };
        /**
         * ReopenIn
         * @description Reopen a budget an overrun closed: one scope key (``agent:ops-bot``), or every
         *     closed scope key of the budget.
         */
        ReopenIn: {
            /** Budget Id */
            budget_id: string;
            /** Scope Key */
            scope_key?: string | null;
        };
        /**
         * ReopenOut
         * @description What was reopened (empty: nothing of that budget was closed).
         */
        ReopenOut: {
            /** Reopened */
            reopened: components["schemas"]["ClosureOut"][];
        };
        /**
         * ReplayIn
         * @description The draft and which of the tenant's records to judge by it.
         */
        ReplayIn: {
            /**
             * Agent
             * @description Only this agent.
             */
            agent?: string | null;
            /**
             * Examples
             * @description Example calls kept per change.
             * @default 3
             */
            examples?: number;
            /**
             * Fail On
             * @description Sets `failed`.
             * @default never
             */
            fail_on?: string;
            /**
             * Max Records
             * @description Replay at most this many.
             * @default 100000
             */
            max_records?: number;
            /**
             * Policy
             * @description The draft policy, as YAML text.
             */
            policy: string;
            /**
             * Since Us
             * @description From this time (µs since the epoch, inclusive).
             */
            since_us?: number | null;
            /**
             * Tool
             * @description Only tools (or models) matching this glob.
             */
            tool?: string | null;
            /**
             * Until Us
             * @description Before this time (µs since the epoch).
             */
            until_us?: number | null;
        };
        /**
         * ReplayOut
         * @description The replay report (``schema`` ``interlock.replay/1``; see docs/replay.md).
         */
        ReplayOut: {
            /**
             * Changes
             * @description Calls per verdict change.
             */
            changes: {
                [key: string]: number;
            };
            /** Examples */
            examples: {
                [key: string]: {
                    [key: string]: unknown;
                }[];
            };
            /** Fail On */
            fail_on: string;
            /** Failed */
            failed: boolean;
            /** Filters */
            filters: {
                [key: string]: unknown;
            };
            /** Loosened */
            loosened: number;
            /**
             * Loosening
             * @description The changes that are loosenings.
             */
            loosening: string[];
            /** Never Fired */
            never_fired: string[];
            /**
             * Outcome
             * @description unchanged, rules_changed, changed, cannot_tell
             */
            outcome: {
                [key: string]: number;
            };
            /** Policy */
            policy: {
                [key: string]: unknown;
            };
            /**
             * Records
             * @description read, replayed, skipped, truncated
             */
            records: {
                [key: string]: unknown;
            };
            /**
             * Rules
             * @description Per rule id: old, new, changes.
             */
            rules: {
                [key: string]: unknown;
            };
            /**
             * Schema
             * @description interlock.replay/1
             */
            schema: string;
            /**
             * Stateful
             * @description Budgets and rate limits: not replayed.
             */
            stateful: {
                [key: string]: unknown;
            };
            /** Tightened */
            tightened: number;
        } & {
            [key: string]: unknown;
        };
        /** ReservationOut */
        ReservationOut: {
            /** Actual */
            actual: {
                [key: string]: number;
            } | null;
            /** Created Us */
            created_us: number;
            /** Expires Us */
            expires_us: number;
            /** Id */
            id: string;
            /** Idempotency Key */
            idempotency_key: string;
            /** Lines */
            lines: components["schemas"]["BudgetLineOut"][];
            /**
             * Owner
             * @description The agent (key name) that made it.
             */
            owner: string | null;
            /** Replayed */
            replayed: boolean;
            /** Settled Us */
            settled_us: number | null;
            /**
             * Status
             * @enum {string}
             */
            status: "reserved" | "committed" | "released" | "expired";
            /** Tenant */
            tenant: string;
        };
        /** ReservationRefOut */
        ReservationRefOut: {
            /** Amounts */
            amounts: components["schemas"]["AmountOut"][];
            /** Id */
            id: string;
        };
        /**
         * ReserveIn
         * @description Reserve on the policy's budgets, all lines or none. The scope key of each line
         *     (agent, session, tool, tenant) is worked out as for a check: the agent is the
         *     key's name. The same ``idempotency_key`` from the same key returns the first
         *     reservation again.
         */
        ReserveIn: {
            /** Idempotency Key */
            idempotency_key?: string | null;
            /** Lines */
            lines: components["schemas"]["ReserveLineIn"][];
            /** Session Id */
            session_id?: string | null;
            /**
             * Tool
             * @description The tool, for budgets scoped per tool.
             */
            tool?: string | null;
            /**
             * Ttl
             * @description Seconds until released.
             */
            ttl?: number | null;
        };
        /** ReserveLineIn */
        ReserveLineIn: {
            /**
             * Amount
             * @description Units: currency micro-units or tokens; from 1 to 2**53.
             */
            amount: number;
            /** Budget Id */
            budget_id: string;
        };
        /**
         * ReserveOut
         * @description ``reserved`` with the reservation, or not, with the budget that refused.
         */
        ReserveOut: {
            refusal?: components["schemas"]["RefusalOut"] | null;
            reservation?: components["schemas"]["ReservationOut"] | null;
            /** Reserved */
            reserved: boolean;
        };
        /** ShadowOut */
        ShadowOut: {
            /** Reason */
            reason: string;
            /** Rule Ids */
            rule_ids: string[];
            /**
             * Verdict
             * @enum {string}
             */
            verdict: "allow" | "deny" | "require_approval" | "undetermined";
        };
        /**
         * UsageIn
         * @description What a model call really used, in tokens: integers from 0 to 2**53.
         */
        UsageIn: {
            /**
             * Input Tokens
             * @default 0
             */
            input_tokens?: number;
            /**
             * Output Tokens
             * @default 0
             */
            output_tokens?: number;
        };
        /** VerifyOut */
        VerifyOut: {
            /** Breaks */
            breaks: components["schemas"]["ChainBreakOut"][];
            /** Ok */
            ok: boolean;
            /** Records */
            records: number;
            /** Tenant */
            tenant: string;
        };
        /** WhoAmIOut */
        WhoAmIOut: {
            /** Id */
            id: string;
            /** Name */
            name: string;
            /**
             * Role
             * @enum {string}
             */
            role: "agent" | "approver" | "admin";
            /** Tenant */
            tenant: string;
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    list_approvals_v1_approvals_get: {
        parameters: {
            query?: {
                limit?: number;
                /** @description Which ones (or all). */
                status?: "pending" | "approved" | "denied" | "expired" | "claimed" | "all";
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ApprovalList"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    get_approval_v1_approvals__approval_id__get: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description apr_... */
                approval_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ApprovalOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description No such record in the key's tenant. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    approve_v1_approvals__approval_id__approve_post: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description apr_... */
                approval_id: string;
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["DecideIn"] | null;
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ApprovalOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description No such record in the key's tenant. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The record is no longer in a state that allows this. */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    deny_v1_approvals__approval_id__deny_post: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description apr_... */
                approval_id: string;
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["DecideIn"] | null;
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ApprovalOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description No such record in the key's tenant. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The record is no longer in a state that allows this. */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    wait_for_approval_v1_approvals__approval_id__wait_get: {
        parameters: {
            query?: {
                /** @description Seconds to wait at most (cut to the server's limit, 60 by default). */
                timeout?: number;
            };
            header?: never;
            path: {
                /** @description apr_... */
                approval_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ApprovalOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description No such record in the key's tenant. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    approval_history_v1_approvals_history_get: {
        parameters: {
            query?: {
                /** @description The `next` of the previous page: continue with older ones. */
                before?: string | null;
                /** @description Approvals per page. */
                limit?: number;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ApprovalHistory"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    query_audit_v1_audit_get: {
        parameters: {
            query?: {
                agent?: string | null;
                decision?: ("allow" | "deny" | "require_approval" | "undetermined") | null;
                decision_id?: string | null;
                kind?: string | null;
                limit?: number;
                /** @description Only records after this sequence number. */
                since_seq?: number;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["AuditPage"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    export_audit_v1_audit_export_get: {
        parameters: {
            query?: {
                agent?: string | null;
                decision?: ("allow" | "deny" | "require_approval" | "undetermined") | null;
                decision_id?: string | null;
                kind?: string | null;
                /** @description Only records after this sequence number. */
                since_seq?: number;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One JSON object per line (the records of `GET /v1/audit`). */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/x-ndjson": unknown;
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    replay_audit_v1_audit_replay_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ReplayIn"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ReplayOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    verify_audit_v1_audit_verify_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["VerifyOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    budget_status_v1_budgets_get: {
        parameters: {
            query?: {
                budget_id?: string | null;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["BudgetList"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    commit_v1_budgets_commit_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["CommitIn"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ReservationOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description No such record in the key's tenant. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The record is no longer in a state that allows this. */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    release_v1_budgets_release_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ReleaseIn"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ReservationOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description No such record in the key's tenant. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The record is no longer in a state that allows this. */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    reopen_v1_budgets_reopen_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ReopenIn"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ReopenOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    reserve_v1_budgets_reserve_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ReserveIn"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ReserveOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    check_v1_check_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ActionIn"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["DecisionOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    check_batch_v1_check_batch_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["BatchIn"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["DecisionOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    issue_v1_grants_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["IssueIn"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["GrantOut"];
                };
            };
            /** @description The decision cannot be granted (`code` says why). */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description No such record in the key's tenant. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    claim_v1_grants_claim_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ClaimIn"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["GrantClaimsOut"];
                };
            };
            /** @description Not a grant of this tenant (`code`: grant_invalid, unknown_key, ...). */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The record is no longer in a state that allows this. */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The grant expired before it was claimed. */
            410: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    health_v1_health_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["HealthOut"];
                };
            };
        };
    };
    jwks_v1_keys_jwks_json_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": unknown;
                };
            };
            /** @description No signing keys. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
        };
    };
    confirm_reload_v1_policy_reload_confirm_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ConfirmReloadIn"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["PolicyReloadOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description No such record in the key's tenant. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The record is no longer in a state that allows this. */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    ready_v1_ready_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ReadyOut"];
                };
            };
            /** @description Not ready: see `checks`. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ReadyOut"];
                };
            };
        };
    };
    record_input_v1_sessions_input_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["InputIn"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["RecordedOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The session history cannot be written. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    record_outcome_v1_sessions_outcome_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["OutcomeIn"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["RecordedOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The key's role may not do this (or it would decide its own request). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The request is invalid; `field` names what is wrong. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
            /** @description The session history cannot be written. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
    whoami_v1_whoami_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["WhoAmIOut"];
                };
            };
            /** @description No API key, or one that is malformed, unknown or revoked. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorOut"];
                };
            };
        };
    };
}
