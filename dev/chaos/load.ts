/**
 * Orders through the HTTP API, placed the way a careful client does: one
 * Idempotency-Key per intent, generated once, and every retry of that intent
 * reuses it. Retried: network errors and timeouts, 5xx, 408, 409 and 429 (waiting
 * Retry-After when given). Any other answer ends the attempt (and is a
 * harness or product bug, reported as not accepted).
 *
 * Some intents are deliberately sent again after their 202, as a client whose
 * response was lost would: the replay must name the same order.
 *
 * A share of the orders that complete get one or two refunds (at once, each
 * under its own Idempotency-Key, retried under it the same way), placed while
 * the fault may still run: the refund load of the fault scenarios.
 */
import type { RefundSubmission, Submission } from './invariants.ts';

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
  /** When given, each intent's first 202 is appended here as it arrives (the restore drill replays them). */
  accepted?: AcceptedOrder[];
}

/** An order a client saw accepted: what it sent, what the 202 said, and when (epoch ms). */
export interface AcceptedOrder {
  submission: Submission;
  /** The request body, byte for byte: a replay must send the same one. */
  body: string;
  orderId: string;
  /** The 202's parsed body. */
  response: unknown;
  at: number;
}

export interface LoadStats {
  requests: number;
  retries: number;
  replays: number;
  /** Refund requests among `requests`. */
  refundRequests: number;
}

/** Every third order that should complete gets refunds. */
const refundsOrder = (i: number, paymentMethod: string) => i % 3 === 1 && paymentMethod === 'pm_card_visa';

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

export async function runLoad(opts: LoadOptions): Promise<{
  submissions: Submission[];
  refunds: RefundSubmission[];
  stats: LoadStats;
}> {
  const stats: LoadStats = { requests: 0, retries: 0, replays: 0, refundRequests: 0 };
  const submissions: Submission[] = [];
  const refundTasks: Promise<RefundSubmission[]>[] = [];
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
      const answer = await postUntilAnswered(opts, stats, `${opts.apiUrl}/v1/orders`, clientKey, body, false);
      if (answer.kind === 'gave_up') {
        submission.gaveUp ??= answer.why;
        return submission;
      }
      if (answer.status !== 202) {
        submission.gaveUp = `HTTP ${answer.status}: ${answer.text.slice(0, 200)}`;
        return submission;
      }
      const response = JSON.parse(answer.text) as { id: string };
      if (!submission.orderIds.includes(response.id)) submission.orderIds.push(response.id);
      if (answer.replayed) stats.replays++;
      if (send === 0)
        opts.accepted?.push({ submission, body, orderId: response.id, response, at: Date.now() });
      if (send + 1 < sends) await sleep(200 + opts.rng() * 800, opts.signal);
    }
    const orderId = submission.orderIds[0];
    if (orderId && refundsOrder(i, paymentMethod)) {
      // Decided now, from the seeded rng, so the same seed gives the same refund mix.
      const plan = { count: opts.rng() < 0.5 ? 2 : 1, resend: opts.rng() < 0.2 };
      refundTasks.push(refundWhenCompleted(opts, stats, orderId, i, plan));
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
  const refunds = (await Promise.all(refundTasks)).flat();
  return { submissions: submissions.filter(Boolean), refunds, stats };
}

/**
 * Waits (long-polling GET /v1/orders/{id}) until the order completes, then
 * asks for `count` refunds of a third of its amount each, at once, each under
 * its own key and retried under it; `resend` sends each again after its 202,
 * as a client whose response was lost would. An order that ends otherwise, or
 * never completes before the client gives up, gets no refund (the order's own
 * verdict covers it).
 */
async function refundWhenCompleted(
  opts: LoadOptions,
  stats: LoadStats,
  orderId: string,
  i: number,
  plan: { count: number; resend: boolean },
): Promise<RefundSubmission[]> {
  let amount: number | undefined;
  for (let attempt = 1; amount === undefined; attempt++) {
    if (opts.signal.aborted || Date.now() > opts.giveUpAt()) return [];
    try {
      const res = await fetch(`${opts.apiUrl}/v1/orders/${orderId}?wait=10`, {
        headers: { authorization: `Bearer ${opts.apiKey}` },
        signal: AbortSignal.any([opts.signal, AbortSignal.timeout(20_000)]),
      });
      const text = await res.text();
      if (res.ok) {
        const order = JSON.parse(text) as { status: string; amount: number };
        if (order.status === 'completed') amount = order.amount;
        else if (order.status === 'rejected' || order.status === 'needs_attention') return [];
        else continue; // the long poll ended before a terminal status: ask again at once
      }
    } catch {
      /* the API may be down: ask again after a pause */
    }
    await sleep(backoff(attempt, opts.rng), opts.signal);
  }
  const each = Math.max(1, Math.floor(amount / 3));
  return Promise.all(
    Array.from({ length: plan.count }, (_, n) =>
      placeRefund(opts, stats, {
        clientKey: `chaos-${opts.tag}-${opts.scenario}-${i}-refund-${n}`,
        orderId,
        amount: each,
        sends: plan.resend ? 2 : 1,
      }),
    ),
  );
}

async function placeRefund(
  opts: LoadOptions,
  stats: LoadStats,
  r: { clientKey: string; orderId: string; amount: number; sends: number },
): Promise<RefundSubmission> {
  const submission: RefundSubmission = {
    clientKey: r.clientKey,
    orderId: r.orderId,
    amount: r.amount,
    refundIds: [],
  };
  const body = JSON.stringify({ amount: r.amount, reason: 'chaos' });
  for (let send = 0; send < r.sends; send++) {
    const url = `${opts.apiUrl}/v1/orders/${r.orderId}/refunds`;
    const answer = await postUntilAnswered(opts, stats, url, r.clientKey, body, true);
    if (answer.kind === 'gave_up') {
      submission.gaveUp ??= answer.why;
      return submission;
    }
    if (answer.status === 202) {
      const id = (JSON.parse(answer.text) as { id: string }).id;
      if (!submission.refundIds.includes(id)) submission.refundIds.push(id);
      if (answer.replayed) stats.replays++;
    } else if (answer.status === 422 && answer.text.includes('refund-exceeds-charge')) {
      submission.refused = true;
      return submission;
    } else {
      submission.gaveUp = `HTTP ${answer.status}: ${answer.text.slice(0, 200)}`;
      return submission;
    }
    if (send + 1 < r.sends) await sleep(200 + opts.rng() * 800, opts.signal);
  }
  return submission;
}

/** A definite answer to one POST (any status but 408, 409, 429 and 5xx), or why the client stopped asking. */
export type Answer =
  { kind: 'answer'; status: number; text: string; replayed: boolean } | { kind: 'gave_up'; why: string };

/**
 * POSTs under one Idempotency-Key until a definite answer: network errors,
 * timeouts, 408, 409, 429 and 5xx (a 503 while a recovery is pending among them)
 * are retried under the same key, after Retry-After when given, until
 * `giveUpAt`.
 */
export async function postUntilAnswered(
  opts: Pick<LoadOptions, 'apiKey' | 'giveUpAt' | 'rng' | 'signal'>,
  stats: LoadStats,
  url: string,
  idempotencyKey: string,
  body: string,
  refund: boolean,
): Promise<Answer> {
  for (let attempt = 1; ; attempt++) {
    if (opts.signal.aborted) return { kind: 'gave_up', why: 'harness stopped' };
    if (Date.now() > opts.giveUpAt())
      return { kind: 'gave_up', why: `gave up after ${attempt - 1} attempts` };
    stats.requests++;
    if (refund) stats.refundRequests++;
    if (attempt > 1) stats.retries++;
    let wait: number;
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${opts.apiKey}`,
          'content-type': 'application/json',
          'idempotency-key': idempotencyKey,
        },
        body,
        signal: AbortSignal.any([opts.signal, AbortSignal.timeout(15_000)]),
      });
      const text = await res.text();
      if (![408, 409, 429].includes(res.status) && res.status < 500) {
        return {
          kind: 'answer',
          status: res.status,
          text,
          replayed: res.headers.get('idempotent-replayed') === 'true',
        };
      }
      wait = retryAfterMs(res.headers.get('retry-after')) ?? backoff(attempt, opts.rng);
    } catch {
      wait = backoff(attempt, opts.rng); // network error or timeout: the request may or may not have landed
    }
    await sleep(wait, opts.signal);
  }
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
