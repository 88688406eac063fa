/**
 * How an uncertain external step's provider is asked (reconciled), decided
 * from what the provider declares (ProviderCapabilities in
 * src/providers/types.ts), not from an interface only the sandbox implements.
 * Every step's reconciler (src/steps/descriptor.ts) goes through here, so
 * the rule lives in one place.
 *
 * The rule, for a record whose outcome is uncertain:
 * - `lookup` (the sandbox): ask by the downstream key. "Not found" is proof;
 *   the ledger then performs again under the SAME key, but only inside the
 *   key window (Ledger.runExternal / reconcileUnresolved).
 * - `replay` (Stripe), inside the key window and with the original request at
 *   hand: send the same request under the same key. The provider returns the
 *   stored outcome, or performs it if it never happened: either way at most
 *   one effect, because it dedupes by the key.
 * - `search` (Stripe after its window, or whenever the request isn't at hand):
 *   "not found" is proof only once the index's declared lag has passed since
 *   the last request that could have made the effect. Before that the step
 *   stays unknown (`pending`), and parks for an operator if it stays so.
 *   Inside the window a `replay` provider may treat "not found" as not_found
 *   anyway: what follows is a perform under the same key inside the window,
 *   which is a replay and cannot act twice.
 * - `none` (SMTP): nothing can be asked; the email provider's declared
 *   policy decides (src/steps/receipt.ts).
 * Past the window nothing is ever performed again.
 */
import { withinKeyWindow, type OperationRecord } from 'onceflow';
import type { ProviderCapabilities } from '../providers/types.ts';

export type ReconcilePlan =
  | { kind: 'lookup' }
  | { kind: 'replay' }
  | {
      kind: 'search';
      /** "Not found" is proof that nothing happened (the lag has passed since the last possible request). */
      notFoundIsProof: boolean;
      /** "Not found" may lead to a perform under the same key: a replay inside the window (see above). */
      notFoundMayPerform: boolean;
    }
  | { kind: 'none' };

/** The key window the ledger is told about: an override (tests), else the provider's declaration. */
export function stepKeyWindowMs(caps: ProviderCapabilities, override?: number): number | undefined {
  return override ?? caps.keyWindowMs ?? undefined;
}

/**
 * The plan for one reconciliation.
 * - `record`: the ledger record. `'no_claim'` when none exists: a first claim
 *   is only ever released after its request provably never acted, and a
 *   record is reaped only long after the key window, so nothing can have
 *   been sent under the key recently and a search's "not found" is proof.
 *   `undefined` when the caller doesn't know the record (its age is
 *   unknown: inside no window, and a search's "not found" proves nothing).
 * - `canReplay`: the caller holds the original request.
 */
export function planReconcile(
  caps: ProviderCapabilities,
  record: Pick<OperationRecord, 'createdAt'> | 'no_claim' | undefined,
  opts: { keyWindowMs?: number | undefined; canReplay: boolean; nowMs?: number },
): ReconcilePlan {
  const nowMs = opts.nowMs ?? Date.now();
  const windowMs = opts.keyWindowMs ?? caps.keyWindowMs;
  const known = typeof record === 'object' ? record : null;
  const inWindow = windowMs !== null && known !== null && withinKeyWindow(known, windowMs, nowMs);
  if (inWindow && caps.withinWindow === 'lookup') return { kind: 'lookup' };
  if (inWindow && caps.withinWindow === 'replay' && opts.canReplay) return { kind: 'replay' };
  const after = caps.afterWindow;
  if (after.kind === 'lookup') return { kind: 'lookup' };
  if (after.kind === 'none') return { kind: 'none' };
  // Search. No request is ever sent under the key past createdAt + window - margin (the
  // ledger's guard and ours above), and one sent just before reaches the provider within the
  // margin (docs/MODEL.md, A1). So the last possible request is no later than createdAt +
  // window; inside the window it may be now.
  let lastPossibleSendMs = nowMs;
  if (known !== null && windowMs !== null && !inWindow) {
    lastPossibleSendMs = Math.min(nowMs, known.createdAt.getTime() + windowMs);
  }
  return {
    kind: 'search',
    notFoundIsProof: record === 'no_claim' || (known !== null && nowMs >= lastPossibleSendMs + after.lagMs),
    // No claim: "not found" means it never started, and the caller starts it (a fresh claim).
    notFoundMayPerform: record === 'no_claim' || (inWindow && caps.withinWindow === 'replay'),
  };
}
