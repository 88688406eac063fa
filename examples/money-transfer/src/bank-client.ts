/**
 * The bank's client: one call per kind of entry, each under an idempotency
 * key, and a lookup by that key. Every answer has the shape a step stores:
 * `succeeded` (posted) or `failed` (refused, a final business answer), the
 * entry as the result and its ID as the provider's reference.
 */
import type { Entry, EntryKind } from './bank.js';

/** What the bank answered for one key. */
export type BankAnswer = { state: 'succeeded' | 'failed'; result: Entry; providerRef: string };

/**
 * The bank rejected the request before acting on it (400, 409): nothing was
 * posted under this request. `definite: true` tells onceflow so, and it
 * releases the step's claim instead of marking the outcome unknown.
 */
class Rejected extends Error {
  readonly definite = true;
}

const answer = (entry: Entry): BankAnswer => ({
  state: entry.status === 'posted' ? 'succeeded' : 'failed',
  result: entry,
  providerRef: entry.id,
});

export function bankClient(baseUrl: string) {
  async function post(
    key: string,
    body: { kind: EntryKind; account: string; amount: number; refundOf?: string },
  ): Promise<BankAnswer> {
    const res = await fetch(`${baseUrl}/entries`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    if (res.status === 200 || res.status === 422) return answer((await res.json()) as Entry);
    if (res.status >= 400 && res.status < 500) throw new Rejected(`bank rejected the request: ${res.status}`);
    // A 5xx, a timeout or a dropped connection may have posted the entry: the step reconciles.
    throw new Error(`bank answered ${res.status}`);
  }

  return {
    withdraw: (key: string, account: string, amount: number) =>
      post(key, { kind: 'withdrawal', account, amount }),
    deposit: (key: string, account: string, amount: number) =>
      post(key, { kind: 'deposit', account, amount }),
    /** Gives a withdrawal back to its account. */
    refund: (key: string, account: string, amount: number, withdrawalId: string) =>
      post(key, { kind: 'refund', account, amount, refundOf: withdrawalId }),

    async find(key: string): Promise<BankAnswer | { state: 'not_found' }> {
      const res = await fetch(`${baseUrl}/entries?idempotency_key=${encodeURIComponent(key)}`, {
        signal: AbortSignal.timeout(10_000),
      });
      if (res.status === 404) return { state: 'not_found' };
      if (!res.ok) throw new Error(`bank lookup answered ${res.status}`);
      return answer((await res.json()) as Entry);
    },
  };
}

export type BankClient = ReturnType<typeof bankClient>;
