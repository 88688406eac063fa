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
 * `<workflowId>/<step>[/<part>...]`: the operation key of one step of one
 * workflow. `parts` name a repeated step (a status per status, a re-drive
 * epoch); each follows the step name's alphabet, or this throws (a fixed step
 * name is a programming error, found on the first run). The whole key's length
 * is the ledger's to check (1..255 visible ASCII): a workflow ID too long for
 * it fails the step's activity as a non-retryable InvalidInput, which the
 * workflow can handle, rather than failing the workflow task forever.
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
