/**
 * Orders through the HTTP API, placed the way a careful client does: one
 * Idempotency-Key per intent, generated once, and every retry of that intent
 * reuses it. Retried: network errors and timeouts, 5xx, 409 and 429 (waiting
 * Retry-After when given). Any other answer ends the attempt (and is a
 * harness or product bug, reported as not accepted).
 *
 * Some intents are deliberately sent again after their 202, as a client whose
 * response was lost would: the replay must name the same order.
 */
import type { Submission } from './invariants.ts';

export interface LoadOptions {
  apiUrl: string;
  apiKey: string;
  scenario: string;
  /** Unique per run, so customer ids of different runs/scenarios never mix. */
  tag: string;
  orders: number;
  concurrency: number;
  /** Orders are released evenly over this window, so they meet the fault at different stages. */
  spreadMs: number;
  /** A client stops retrying an intent at this time (epoch ms); asked on every retry, since it moves once the fault clears. */
  giveUpAt: () => number;
  rng: () => number;
  signal: AbortSignal;
}

export interface LoadStats {
  requests: number;
  retries: number;
  replays: number;
}

/** Customer id prefix that identifies a scenario's orders in the database. */
export function customerPrefix(tag: string, scenario: string): string {
  return `chaos-${tag}-${scenario}-`;
}

export const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const onAbort = () => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });

function retryAfterMs(header: string | null): number | undefined {
  if (!header) return undefined;
  const secs = Number(header);
  return Number.isFinite(secs) && secs >= 0 ? Math.min(secs * 1000, 30_000) : undefined;
}

export async function runLoad(opts: LoadOptions): Promise<{ submissions: Submission[]; stats: LoadStats }> {
  const stats: LoadStats = { requests: 0, retries: 0, replays: 0 };
  const submissions: Submission[] = [];
  const started = Date.now();
  let next = 0;

  const place = async (i: number): Promise<Submission> => {
    // Every 8th order uses a declining card, so the rejected path runs under faults too.
    const paymentMethod = i % 8 === 7 ? 'pm_card_chargeDeclined' : 'pm_card_visa';
    const clientKey = `chaos-${opts.tag}-${opts.scenario}-${i}`;
    const body = JSON.stringify({
      customer: { id: `${customerPrefix(opts.tag, opts.scenario)}${i}`, email: `buyer${i}@example.com` },
      currency: 'usd',
      items: [{ sku: 'SKU-CHAOS', quantity: 1 + (i % 3), unitAmount: 1000 + i }],
      paymentMethod,
    });
    const submission: Submission = { clientKey, paymentMethod, orderIds: [] };
    const sends = opts.rng() < 0.2 ? 2 : 1; // a lost response: send the same intent again after its 202
    for (let send = 0; send < sends; send++) {
      let attempt = 0;
      for (;;) {
        if (opts.signal.aborted) {
          submission.gaveUp ??= 'harness stopped';
          return submission;
        }
        if (Date.now() > opts.giveUpAt()) {
          submission.gaveUp ??= `gave up after ${attempt} attempts`;
          return submission;
        }
        attempt++;
        stats.requests++;
        if (attempt > 1) stats.retries++;
        let wait: number;
        try {
          const res = await fetch(`${opts.apiUrl}/v1/orders`, {
            method: 'POST',
            headers: {
              authorization: `Bearer ${opts.apiKey}`,
              'content-type': 'application/json',
              'idempotency-key': clientKey,
            },
            body,
            signal: AbortSignal.any([opts.signal, AbortSignal.timeout(15_000)]),
          });
          const text = await res.text();
          if (res.status === 202) {
            const id = (JSON.parse(text) as { id: string }).id;
            if (!submission.orderIds.includes(id)) submission.orderIds.push(id);
            if (res.headers.get('idempotent-replayed') === 'true') stats.replays++;
            break;
          }
          if (res.status === 409 || res.status === 429 || res.status >= 500) {
            wait = retryAfterMs(res.headers.get('retry-after')) ?? backoff(attempt, opts.rng);
          } else {
            submission.gaveUp = `HTTP ${res.status}: ${text.slice(0, 200)}`;
            return submission;
          }
        } catch {
          wait = backoff(attempt, opts.rng); // network error or timeout: the request may or may not have landed
        }
        await sleep(wait, opts.signal);
      }
      if (send + 1 < sends) await sleep(200 + opts.rng() * 800, opts.signal);
    }
    return submission;
  };

  const client = async () => {
    for (;;) {
      const i = next++;
      if (i >= opts.orders) return;
      const releaseAt = started + (opts.orders > 1 ? (opts.spreadMs * i) / (opts.orders - 1) : 0);
      await sleep(Math.max(0, releaseAt - Date.now()), opts.signal);
      submissions[i] = await place(i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, opts.concurrency) }, client));
  return { submissions: submissions.filter(Boolean), stats };
}

function backoff(attempt: number, rng: () => number): number {
  const base = Math.min(5_000, 250 * 2 ** Math.min(attempt - 1, 5));
  return base / 2 + rng() * (base / 2);
}

/** A small seeded PRNG (mulberry32): the same seed gives the same order mix and fault schedule. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0 || 0x9e3779b9;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
