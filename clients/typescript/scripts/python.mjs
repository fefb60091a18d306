// Which Python runs the Interlock server for the scripts and the tests:
// $INTERLOCK_PYTHON, else the repository's .venv, else python3 on the PATH.
import { existsSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..");

export function interlockPython() {
  const fromEnv = process.env.INTERLOCK_PYTHON;
  if (fromEnv) return fromEnv;
  const venv = resolve(packageRoot, "../../.venv/bin/python");
  return existsSync(venv) ? venv : "python3";
}
