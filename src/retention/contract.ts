/**
 * The retention workflow's contract: its input, shared by the Schedule that
 * starts it (src/retention/schedule.ts) and the workflow
 * (workflows/retention.ts). Deterministic and I/O-free: workflow code
 * imports it.
 */

export interface RetentionInput {
  /** Succeeded and failed operations completed longer ago than this are deleted. */
  windowMs: number;
  /** Rows per DELETE statement. */
  batchSize: number;
  /** DELETE statements per run at most; the rest waits for the next run. */
  maxBatches: number;
}
