/**
 * The conformance table, driven through the client's shared guard (`guarded`, which every
 * adapter uses) against a live `interlock serve`: the same verdicts, bodies run and
 * refusal texts as Python's adapters.
 */
import { describe, expect, it } from "vitest";
import { InterlockBlocked } from "../src/errors.js";
import { guarded, judge } from "../src/judge.js";
import type { ActionInput } from "../src/types.js";
import { ROWS, expectObserversLogged, expectRefusal, setUp } from "./support/rows.js";

describe("the conformance table through the client", () => {
  it("exports every verdict and a pass-through", () => {
    expect(new Set(ROWS.map((row) => row.verdict))).toEqual(
      new Set([null, "allow", "deny", "require_approval", "undetermined"]),
    );
  });

  for (const row of ROWS) {
    it(row.behaviour, async () => {
      const setup = await setUp(row);
      try {
        const action: ActionInput = { kind: "tool", name: row.tool, arguments: row.args };
        const map = () => (setup.mapper ? setup.mapper(action) : action);
        let runs = 0;
        let thrown: unknown = null;
        try {
          const result = await guarded(setup.options, map, () => {
            runs += 1;
            return "ran";
          });
          expect(result).toBe("ran");
        } catch (error) {
          thrown = error;
        }
        expect(runs).toBe(row.runs ? 1 : 0);
        if (row.verdict === null || row.verdict === "allow") {
          expect(thrown).toBeNull();
        } else {
          expect(thrown).toBeInstanceOf(InterlockBlocked);
          expectRefusal(row, thrown);
        }
        const judgement = await judge(setup.options, map);
        expect(judgement.decision?.verdict ?? null).toBe(row.verdict);
        expectObserversLogged(row, setup.warnings);
      } finally {
        await setup.done();
      }
    });
  }
});
