/**
 * The one start-up poller (dev tooling, not the product): `npm start`, the chaos harness, the benchmarks
 * and the tests wait for a server (a health URL, the Temporal frontend, a
 * log line) through it, so every wait gives up the same way and says why.
 */

export interface PollOptions {
  timeoutMs: number;
  /** The pause between probes; default 250 ms. */
  intervalMs?: number;
  /** Says why waiting on is pointless (the process exited), or undefined to go on. */
  abandon?: () => string | undefined;
  /** Called every 10 s while still waiting (a "still waiting" line for a slow cold start). */
  onWaiting?: () => void;
}

/**
 * Probes until `probe` resolves true. A probe that resolves false or throws
 * is tried again after the interval; on timeout the error names `what` and
 * the probe's last error, which usually says why.
 */
export async function pollUntil(
  what: string,
  probe: () => Promise<boolean>,
  { timeoutMs, intervalMs = 250, abandon, onWaiting }: PollOptions,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let nextNotice = Date.now() + 10_000;
  let lastError: unknown;
  for (;;) {
    const why = abandon?.();
    if (why) throw new Error(`${what}: ${why}`);
    try {
      if (await probe()) return;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const last = lastError === undefined ? '' : `: ${String(lastError)}`;
      throw new Error(`${what} did not answer within ${timeoutMs / 1000}s${last}`);
    }
    if (onWaiting && Date.now() >= nextNotice) {
      onWaiting();
      nextNotice = Date.now() + 10_000;
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/**
 * True once `url` answers below 500 (a 4xx still means it serves). A 5xx
 * rejects with its status and body: a worker's /readyz names the failing check.
 */
export async function httpOk(url: string): Promise<boolean> {
  const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
  if (res.status < 500) {
    await res.body?.cancel();
    return true;
  }
  const body = (await res.text().catch(() => '')).trim().slice(0, 1000);
  throw new Error(`HTTP ${res.status}${body ? `: ${body}` : ''}`);
}

/** Polls `url` until it answers below 500 (httpOk). */
export function waitForHttp(
  url: string,
  timeoutMs: number,
  opts: Omit<PollOptions, 'timeoutMs'> = {},
): Promise<void> {
  return pollUntil(url, () => httpOk(url), { intervalMs: 200, ...opts, timeoutMs });
}
