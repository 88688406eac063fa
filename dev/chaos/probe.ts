/**
 * The fail-fast probe of the blackhole scenarios, beside the load: every
 * PROBE_INTERVAL_MS it sends one request to the API, in turn a create
 * (POST /v1/orders under a new Idempotency-Key), a read of an accepted order
 * (GET /v1/orders/{id}) and GET /readyz, without waiting for the previous one,
 * with a client timeout of PROBE_CLIENT_TIMEOUT_MS, and records each one's
 * status and duration. While a dependency is cut off the API must still
 * answer, within FAIL_FAST_BOUND_MS, with something a client can act on (a
 * 503 with Retry-After, or the answer itself): violations are a 500, an
 * answer slower than the bound, and no answer before the client timeout.
 * With only Temporal cut off, a create must also be accepted (202).
 *
 * The probe's creates are orders of the scenario like the load's (same
 * customer prefix): once it stops, each create that did not get its 202 is
 * sent again under its key until it has a definite answer, as a careful client
 * would, and every create is then judged by the invariants (nothing lost,
 * nothing doubled, everything settled).
 */
import type { Submission, Violation } from './invariants.ts';
import { customerPrefix, postUntilAnswered, sleep, type AcceptedOrder, type LoadStats } from './load.ts';

/**
 * The bound on any answer while Postgres or Temporal can't be reached
 * (docs/OPERATIONS.md, "The scenarios"): the API's Postgres timeouts end a
 * request well inside it (docs/DEPLOYING.md, "Postgres timeouts").
 */
const FAIL_FAST_BOUND_MS = 5_000;
const PROBE_CLIENT_TIMEOUT_MS = 15_000;
const PROBE_INTERVAL_MS = 500;
/** The probe goes on this long after the fault cleared: the first requests after a heal count too. */
export const PROBE_TAIL_MS = 5_000;

const ROUTES = ['POST /v1/orders', 'GET /v1/orders/{id}', 'GET /readyz'] as const;
type Route = (typeof ROUTES)[number];

interface Sample {
  route: Route;
  /** ms after the probe started. */
  at: number;
  ms: number;
  /** The HTTP status, or why there was none. */
  outcome: number | 'no answer' | 'error';
  detail?: string;
}

interface ProbeRouteStats {
  requests: number;
  /** Requests by status ("202", "503", ...; "no answer": the client timeout; "error": a connection error). */
  statuses: Record<string, number>;
  maxMs: number;
  p99Ms: number;
}

export interface ProbeReport {
  boundMs: number;
  clientTimeoutMs: number;
  intervalMs: number;
  requests: number;
  statuses: Record<string, number>;
  /** Answers with status 500. */
  serverErrors: number;
  /** Answers slower than the bound. */
  slow: number;
  /** Requests with no answer: the client timeout, or a connection error. */
  noAnswer: number;
  /** Over every request; one with no answer counts with the time it was given up after. */
  maxMs: number;
  p99Ms: number;
  routes: Partial<Record<Route, ProbeRouteStats>>;
}

interface Create {
  clientKey: string;
  body: string;
  orderId?: string;
}

/** Nearest-rank percentile of sorted values. */
function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

function statsOf(samples: readonly Sample[]): ProbeRouteStats {
  const statuses: Record<string, number> = {};
  for (const s of samples) statuses[String(s.outcome)] = (statuses[String(s.outcome)] ?? 0) + 1;
  const sorted = samples.map((s) => s.ms).sort((a, b) => a - b);
  return {
    requests: samples.length,
    statuses,
    maxMs: Math.round(sorted.at(-1) ?? 0),
    p99Ms: Math.round(percentile(sorted, 99)),
  };
}

const secs = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

export class FailFastProbe {
  private readonly samples: Sample[] = [];
  private readonly creates: Create[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private readonly stopping = new AbortController();
  private startedAt = 0;
  private loop: Promise<void> | undefined;

  constructor(
    private readonly opts: {
      apiUrl: string;
      apiKey: string;
      tag: string;
      scenario: string;
      /** The load's accepted orders: the reads pick the latest (or the probe's own). */
      accepted: readonly AcceptedOrder[];
      /** The harness stopping: requests in flight are abandoned, not recorded. */
      signal: AbortSignal;
      /** Every create answered must be a 202 (only Temporal is cut off: the outbox holds the orders). */
      mustAccept: boolean;
    },
  ) {}

  start(): void {
    this.startedAt = Date.now();
    this.loop = (async () => {
      for (let tick = 0; !this.stopping.signal.aborted && !this.opts.signal.aborted; tick++) {
        const request = this.send(ROUTES[tick % ROUTES.length]!);
        this.inFlight.add(request);
        void request.finally(() => this.inFlight.delete(request));
        await sleep(PROBE_INTERVAL_MS, AbortSignal.any([this.stopping.signal, this.opts.signal]));
      }
    })();
  }

  /** Sends no more requests, and waits for those in flight (each ends by the client timeout). */
  async stop(): Promise<void> {
    this.stopping.abort();
    await this.loop;
    await Promise.all([...this.inFlight]);
  }

  private latestOrderId(): string | undefined {
    const own = [...this.creates].reverse().find((c) => c.orderId !== undefined)?.orderId;
    return this.opts.accepted.at(-1)?.orderId ?? own;
  }

  private async send(wanted: Route): Promise<void> {
    const orderId = this.latestOrderId();
    // No order accepted yet to read: ask for readiness instead.
    const route: Route = wanted === 'GET /v1/orders/{id}' && !orderId ? 'GET /readyz' : wanted;
    const auth = { authorization: `Bearer ${this.opts.apiKey}` };
    let url: string;
    let init: RequestInit;
    let create: Create | undefined;
    if (route === 'POST /v1/orders') {
      const n = this.creates.length;
      create = {
        clientKey: `chaos-${this.opts.tag}-${this.opts.scenario}-probe-${n}`,
        body: JSON.stringify({
          customer: {
            id: `${customerPrefix(this.opts.tag, this.opts.scenario)}probe-${n}`,
            email: `probe${n}@example.com`,
          },
          currency: 'usd',
          items: [{ sku: 'SKU-CHAOS-PROBE', quantity: 1, unitAmount: 500 + n }],
          paymentMethod: 'pm_card_visa',
        }),
      };
      this.creates.push(create);
      url = `${this.opts.apiUrl}/v1/orders`;
      init = {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json', 'idempotency-key': create.clientKey },
        body: create.body,
      };
    } else if (route === 'GET /v1/orders/{id}') {
      url = `${this.opts.apiUrl}/v1/orders/${orderId}`;
      init = { headers: auth };
    } else {
      url = `${this.opts.apiUrl}/readyz`;
      init = {};
    }
    const started = Date.now();
    const at = started - this.startedAt;
    try {
      const res = await fetch(url, {
        ...init,
        signal: AbortSignal.any([this.opts.signal, AbortSignal.timeout(PROBE_CLIENT_TIMEOUT_MS)]),
      });
      const text = await res.text(); // the whole answer, inside the client timeout
      this.samples.push({ route, at, ms: Date.now() - started, outcome: res.status });
      if (create && res.status === 202) create.orderId = (JSON.parse(text) as { id: string }).id;
    } catch (err) {
      if (this.opts.signal.aborted) return; // the harness is stopping: not the API's doing
      const timedOut = err instanceof Error && err.name === 'TimeoutError';
      const cause = err instanceof Error && err.cause instanceof Error ? err.cause.message : String(err);
      this.samples.push({
        route,
        at,
        ms: Date.now() - started,
        outcome: timedOut ? 'no answer' : 'error',
        ...(timedOut ? {} : { detail: cause }),
      });
    }
  }

  /** The figures, and a violation for every 500, every answer past the bound and every request with no answer. */
  verdict(): { report: ProbeReport; violations: Violation[] } {
    const violations: Violation[] = [];
    for (const s of this.samples) {
      const when = `at +${secs(s.at)}`;
      if (s.outcome === 500) {
        violations.push({
          kind: 'server_error',
          subject: s.route,
          detail: `HTTP 500 after ${secs(s.ms)} ${when}`,
        });
      }
      if (typeof s.outcome === 'number' && s.ms > FAIL_FAST_BOUND_MS) {
        violations.push({
          kind: 'slow_answer',
          subject: s.route,
          detail: `HTTP ${s.outcome} after ${secs(s.ms)} (bound ${secs(FAIL_FAST_BOUND_MS)}) ${when}`,
        });
      }
      if (
        this.opts.mustAccept &&
        s.route === 'POST /v1/orders' &&
        typeof s.outcome === 'number' &&
        s.outcome !== 202
      ) {
        violations.push({
          kind: 'unexpected_outcome',
          subject: s.route,
          detail: `HTTP ${s.outcome} ${when}: only Temporal is cut off, so every create must be accepted (the outbox holds it)`,
        });
      }
      if (typeof s.outcome !== 'number') {
        violations.push({
          kind: 'no_answer',
          subject: s.route,
          detail:
            s.outcome === 'no answer'
              ? `no answer within the client timeout (${secs(PROBE_CLIENT_TIMEOUT_MS)}) ${when}`
              : `connection error after ${secs(s.ms)} ${when}: ${s.detail ?? 'unknown'}`,
        });
      }
    }
    const all = statsOf(this.samples);
    const routes: ProbeReport['routes'] = {};
    for (const route of ROUTES) {
      const samples = this.samples.filter((s) => s.route === route);
      if (samples.length) routes[route] = statsOf(samples);
    }
    const report: ProbeReport = {
      boundMs: FAIL_FAST_BOUND_MS,
      clientTimeoutMs: PROBE_CLIENT_TIMEOUT_MS,
      intervalMs: PROBE_INTERVAL_MS,
      requests: all.requests,
      statuses: all.statuses,
      serverErrors: violations.filter((v) => v.kind === 'server_error').length,
      slow: violations.filter((v) => v.kind === 'slow_answer').length,
      noAnswer: violations.filter((v) => v.kind === 'no_answer').length,
      maxMs: all.maxMs,
      p99Ms: all.p99Ms,
      routes,
    };
    return { report, violations };
  }

  /**
   * The probe's creates as client intents for the verdict: one that did not
   * get its 202 is sent again under its key (retried as the load retries)
   * until a definite answer or `giveUpAt`.
   */
  async submissions(opts: {
    giveUpAt: () => number;
    rng: () => number;
    signal: AbortSignal;
  }): Promise<Submission[]> {
    const stats: LoadStats = { requests: 0, retries: 0, replays: 0, refundRequests: 0 };
    const client = { apiKey: this.opts.apiKey, ...opts };
    return Promise.all(
      this.creates.map(async (c): Promise<Submission> => {
        const submission: Submission = {
          clientKey: c.clientKey,
          paymentMethod: 'pm_card_visa',
          orderIds: [],
        };
        if (c.orderId !== undefined) {
          submission.orderIds.push(c.orderId);
          return submission;
        }
        const url = `${this.opts.apiUrl}/v1/orders`;
        const answer = await postUntilAnswered(client, stats, url, c.clientKey, c.body, false);
        if (answer.kind === 'gave_up') submission.gaveUp = answer.why;
        else if (answer.status !== 202)
          submission.gaveUp = `HTTP ${answer.status}: ${answer.text.slice(0, 200)}`;
        else submission.orderIds.push((JSON.parse(answer.text) as { id: string }).id);
        return submission;
      }),
    );
  }
}
