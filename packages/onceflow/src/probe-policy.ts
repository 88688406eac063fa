/**
 * When local mode reads the record before it claims (`replayProbe: 'auto'`).
 *
 * The probe is one primary-key read before the transaction. It answers a
 * replay alone (1 statement); without it a replay goes through the claim
 * (`BEGIN`, the claim that finds the record, `ROLLBACK`, a read: 4
 * statements, plus the body's `first` statements, rolled back). But every
 * first run pays for it too: 5 statements instead of 4. With a replay share
 * r of an operation type's calls, probing costs (1 - r) extra statements per
 * call and saves 3r, so it pays off above r = 1/4. Statements, not round
 * trips, are the unit: on a busy machine each one is CPU on both sides.
 *
 * The policy keeps, per operation type, an exponentially weighted share of
 * recent calls that found the record already there, and probes while that
 * share is at least the break-even. Both paths give the same answers under
 * the same guarantees (the claim's conflict path is what a duplicate racing
 * the probe takes anyway), so the policy only ever changes the cost.
 */

/** Probe while at least this share of recent calls found the record: the break-even above. */
export const PROBE_BREAK_EVEN = 0.25;
/** Weight of the newest call in the share: about the last 8 calls count. */
const NEWEST_WEIGHT = 1 / 8;
/** Operation types tracked at most; past it, every share starts again from "fresh". */
const MAX_TRACKED_TYPES = 1024;

export class ReplayProbePolicy {
  readonly #share = new Map<string, number>();

  /** True when reading first is the cheaper path for this operation type. A new type starts fresh. */
  shouldProbe(operationType: string): boolean {
    return (this.#share.get(operationType) ?? 0) >= PROBE_BREAK_EVEN;
  }

  /** Records one call's outcome: `existed` when the record was already there (a replay, conflict or busy). */
  record(operationType: string, existed: boolean): void {
    const previous = this.#share.get(operationType);
    if (previous === undefined && this.#share.size >= MAX_TRACKED_TYPES) this.#share.clear();
    const share = previous ?? 0;
    this.#share.set(operationType, share + ((existed ? 1 : 0) - share) * NEWEST_WEIGHT);
  }
}
