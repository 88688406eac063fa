/**
 * The provider's client: a charge under an idempotency key, and a lookup by
 * that key. Both answer in the shape a step stores (`state`, `result`,
 * `providerRef`); a plain activity reads `.result`.
 */
import type { Charge } from './provider.js';

/** What the provider answered for one key: the charge it made. */
export type ChargeAnswer = { state: 'succeeded'; result: Charge; providerRef: string };

/**
 * The provider refused the request outright: nothing was charged. `definite`
 * tells the ledger so, and it releases the step's claim instead of marking
 * the outcome unknown.
 */
class Refused extends Error {
  readonly definite = true;
}

const answer = (charge: Charge): ChargeAnswer => ({
  state: 'succeeded',
  result: charge,
  providerRef: charge.id,
});

export function providerClient(baseUrl: string) {
  return {
    async charge(key: string, args: { amount: number; currency: string }): Promise<ChargeAnswer> {
      const res = await fetch(`${baseUrl}/charges`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ amount: args.amount, currency: args.currency }),
        signal: AbortSignal.timeout(10_000),
      });
      if (res.status >= 400 && res.status < 500) throw new Refused(`provider refused: ${res.status}`);
      // Anything else (a 5xx, a timeout, a dropped connection) may have charged: the step reconciles.
      if (!res.ok) throw new Error(`provider answered ${res.status}`);
      return answer((await res.json()) as Charge);
    },

    async findCharge(key: string): Promise<ChargeAnswer | { state: 'not_found' }> {
      const res = await fetch(`${baseUrl}/charges?idempotency_key=${encodeURIComponent(key)}`, {
        signal: AbortSignal.timeout(10_000),
      });
      if (res.status === 404) return { state: 'not_found' };
      if (!res.ok) throw new Error(`provider lookup answered ${res.status}`);
      return answer((await res.json()) as Charge);
    },
  };
}

export type ProviderClient = ReturnType<typeof providerClient>;
