/**
 * When local mode reads the record before it claims (`replayProbe: 'auto'`). The probe answers a
 * replay in 1 statement instead of 4 through the claim, but costs every first run one more: with a
 * replay share r, it pays above r = 1/4. Per operation type we keep a moving share of calls that
 * found the record and probe while it is at least that. Both paths give the same answers.
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
