/**
 * Deterministic step keys, derived from the workflow ID (never the run ID: it
 * changes on retry, reset and continue-as-new). Workflow-safe: no imports, no
 * Node built-ins, no I/O, so workflow code can compute a step's key and pass it
 * to the activity, where it is visible in the workflow's history.
 *
 * Published as `onceflow/workflow`.
 */

/** A step name: visible ASCII without `/` (the separator), so two steps never derive the same key. */
const STEP_NAME = /^[\x21-\x2E\x30-\x7E]{1,64}$/;

/**
 * `<workflowId>/<step>[/<part>...]`; `parts` name a repeated step. The length is left to the ledger,
 * so a too-long workflow ID fails the activity (handleable) rather than the workflow task forever.
 */
export function stepKey(workflowId: string, step: string, ...parts: (string | number)[]): string {
  for (const part of [step, ...parts.map(String)]) {
    if (!STEP_NAME.test(part)) {
      throw new TypeError(
        `step key part ${JSON.stringify(part)} must be 1 to 64 visible ASCII characters, no "/"`,
      );
    }
  }
  return [workflowId, step, ...parts].join('/');
}
