/**
 * POST /v1/orders with `Prefer: wait=N` (RFC 7240): the answer waits, after
 * commit or on a replay, for the order to reach a terminal status, woken by
 * the order's status notification (src/api/order-waits.ts), and is 200 with
 * GET /v1/orders/{id}'s body then, or the usual 202 when N seconds pass.
 * What the Idempotency-Key stores stays the 202. Behaviour, not speed.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { OrderWaits, type OrderWait } from '../../src/api/order-waits.ts';
import { parsePrefer, preferredWaitSeconds } from '../../src/http/prefer.ts';
import { OPERATION_TYPES } from '../../src/orders/model.ts';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { uniq } from '../support/env.ts';
import { deferred, until } from '../support/wait.ts';
import { call, newTenant, startApi, validOrder, type Res, type TestApi } from './support.ts';

/** Longer than any wait in these tests: a re-read on this interval never happens within one. */
const NEVER_MS = 600_000;
/**
 * The route's own deadline for the waits that must be ended by something
 * else (a wake, a hang-up): the API's maximum. The tests that rely on that
 * have a timeout (TEST_MS) shorter than it, so a request that is not woken
 * fails them rather than answering late.
 */
const WAIT_S = 30;
const TEST_MS = 25_000;

type OrderBody = { id: string; status: string; steps?: unknown[]; chargeId?: string | null };

const post = (api: TestApi, key: string, idem: string, prefer?: string, signal?: AbortSignal) =>
  signal
    ? fetch(`${api.url}/v1/orders`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${key}`,
          'idempotency-key': idem,
          'content-type': 'application/json',
          ...(prefer !== undefined ? { prefer } : {}),
        },
        body: JSON.stringify(validOrder()),
        signal,
      })
    : call(api, 'POST', '/v1/orders', {
        key,
        idem,
        body: validOrder(),
        ...(prefer !== undefined ? { headers: { prefer } } : {}),
      });

/**
 * Resolves with the order ID once a request has read its order and begun to
 * wait for a change (its first OrderWait.next): from then on a change reaches
 * it only through a wake (or a timed re-read, which these tests never allow).
 * Spies on OrderWaits.prototype.watch; call restore() in a finally.
 */
function nextWaiting(): { waiting: Promise<string>; restore(): void } {
  const waiting = deferred<string>();
  const watch = OrderWaits.prototype.watch;
  const spy = vi.spyOn(OrderWaits.prototype, 'watch').mockImplementation(function (
    this: OrderWaits,
    id: string,
  ): OrderWait {
    const wait = watch.call(this, id);
    return {
      next(maxMs, signal) {
        const next = wait.next(maxMs, signal);
        waiting.resolve(id);
        return next;
      },
      done: () => wait.done(),
    };
  });
  return { waiting: waiting.promise, restore: () => spy.mockRestore() };
}

async function storedResponse(api: TestApi, tenantId: string, idem: string) {
  const rec = await api.ledger.get({ tenantId, operationType: OPERATION_TYPES.createOrder, key: idem });
  return rec?.result as { statusCode: number; body: { status: string } } | undefined;
}

describe('Prefer: wait, with a worker running the orders', () => {
  let stack: OrderStack;
  let api: TestApi;
  let t: { tenantId: string; key: string };

  beforeAll(async () => {
    stack = await startOrderStack();
    api = await startApi({ env: { TEMPORAL_TASK_QUEUE: stack.taskQueue } });
    t = await newTenant(api.pool, 'prefer');
  });
  afterAll(async () => {
    await api?.close();
    await stack?.close();
  });

  it('answers 200 with the terminal order as GET returns it; the key still stores the 202', async () => {
    const idem = uniq('idem');
    const res = (await post(api, t.key, idem, `wait=${WAIT_S}`)) as Res;
    expect(res.status).toBe(200);
    const body = res.body as OrderBody;
    expect(body.status).toBe('completed');
    expect(body.chargeId).toMatch(/^ch_/);
    expect(res.headers.get('preference-applied')).toBe(`wait=${WAIT_S}`);
    expect(res.headers.get('vary')).toBe('Prefer');
    expect(res.headers.get('location')).toBe(`/v1/orders/${body.id}`);
    expect(res.headers.get('idempotent-replayed')).toBeNull();
    // The same body as GET /v1/orders/{id} (the order is terminal: nothing changes in between).
    const got = await call(api, 'GET', `/v1/orders/${body.id}`, { key: t.key });
    expect(res.body).toEqual(got.body);
    // What the key stores is what was true at acceptance.
    const stored = await storedResponse(api, t.tenantId, idem);
    expect(stored?.statusCode).toBe(202);
    expect(stored?.body.status).toBe('accepted');

    // A replay with Prefer: wait answers from the order as it is now, and says it is a replay.
    const again = (await post(api, t.key, idem, 'wait=5')) as Res;
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('preference-applied')).toBe('wait=5');
    expect(again.body).toEqual(got.body);
    // A replay without it is the stored 202, as ever.
    const plain = (await post(api, t.key, idem)) as Res;
    expect(plain.status).toBe(202);
    expect(plain.headers.get('idempotent-replayed')).toBe('true');
    expect(plain.headers.get('preference-applied')).toBeNull();
    expect(plain.headers.get('vary')).toBeNull();
    expect((plain.body as OrderBody).status).toBe('accepted');
    expect((plain.body as OrderBody).id).toBe(body.id);
  });

  it('finds `wait` among other preferences, case-insensitively', async () => {
    const res = (await post(api, t.key, uniq('idem'), `respond-async, WAIT=${WAIT_S}; x="a,b"`)) as Res;
    expect(res.status).toBe(200);
    expect((res.body as OrderBody).status).toBe('completed');
    expect(res.headers.get('preference-applied')).toBe(`wait=${WAIT_S}`);
  });

  it('an order that ends rejected is terminal too: 200 with its reason', async () => {
    const res = await call(api, 'POST', '/v1/orders', {
      key: t.key,
      idem: uniq('idem'),
      body: { ...validOrder(), paymentMethod: 'pm_card_chargeDeclined' },
      headers: { prefer: `wait=${WAIT_S}` },
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: 'rejected', reason: expect.stringMatching(/^decline_code:/) });
  });
});

describe('Prefer: wait, with no worker (orders stay accepted until the test moves them)', () => {
  let api: TestApi;
  let waits: OrderWaits;
  let t: { tenantId: string; key: string };

  beforeAll(async () => {
    // startApi's task queue has no worker. No timed re-read ever happens within a wait:
    // a wait ends by a wake, a hang-up or its deadline.
    api = await startApi({
      orderWaits: (pool) =>
        (waits = new OrderWaits({ pool, listeningPollMs: NEVER_MS, fallbackPollMs: NEVER_MS })),
    });
    waits.start();
    await until('the order-status listener to listen', () => waits.listening, { timeoutMs: 15_000 });
    t = await newTenant(api.pool, 'prefer-idle');
  });
  afterAll(async () => {
    await waits?.stop();
    await api?.close();
  });

  it('answers the usual 202 when N seconds pass first, and a replay with Prefer does too', async () => {
    const idem = uniq('idem');
    const res = (await post(api, t.key, idem, 'wait=1')) as Res;
    expect(res.status).toBe(202);
    const body = res.body as OrderBody;
    expect(body.status).toBe('accepted');
    expect(res.headers.get('preference-applied')).toBe('wait=1');
    expect(res.headers.get('vary')).toBe('Prefer');
    expect(res.headers.get('location')).toBe(`/v1/orders/${body.id}`);
    const again = (await post(api, t.key, idem, 'wait=1')) as Res;
    expect(again.status).toBe(202);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.text).toBe(res.text);
    expect(waits.waiting).toBe(0);
  });

  it(
    'is woken by the status notification, not a re-read; more than 30 s counts as 30',
    async () => {
      const idem = uniq('idem');
      const w = nextWaiting();
      try {
        const pending = post(api, t.key, idem, 'wait=3600') as Promise<Res>;
        const first = await Promise.race([
          w.waiting,
          pending.then((r) => ({ answeredWithoutWaiting: r.status })),
        ]);
        // A string: the request waits for this order (an object: it answered without waiting).
        expect(first).toEqual(expect.any(String));
        const id = first as string;
        // What the workflow's last status write does, compressed.
        await api.pool.query(`update orders set status = 'completed' where tenant_id = $1 and id = $2`, [
          t.tenantId,
          id,
        ]);
        const res = await pending;
        expect(res.status).toBe(200);
        expect((res.body as OrderBody).id).toBe(id);
        expect((res.body as OrderBody).status).toBe('completed');
        expect(res.headers.get('preference-applied')).toBe(`wait=${WAIT_S}`);
        expect((await storedResponse(api, t.tenantId, idem))?.statusCode).toBe(202);
      } finally {
        w.restore();
      }
    },
    TEST_MS,
  );

  it(
    'a replay with Prefer: wait waits as well, and answers 200 once the order is terminal',
    async () => {
      const idem = uniq('idem');
      const created = (await post(api, t.key, idem)) as Res;
      expect(created.status).toBe(202);
      const { id } = created.body as OrderBody;
      const w = nextWaiting();
      try {
        const pending = post(api, t.key, idem, `wait=${WAIT_S}`) as Promise<Res>;
        expect(await w.waiting).toBe(id);
        await api.pool.query(`update orders set status = 'rejected' where tenant_id = $1 and id = $2`, [
          t.tenantId,
          id,
        ]);
        const res = await pending;
        expect(res.status).toBe(200);
        expect(res.headers.get('idempotent-replayed')).toBe('true');
        expect((res.body as OrderBody).status).toBe('rejected');
      } finally {
        w.restore();
      }
    },
    TEST_MS,
  );

  it(
    'stops waiting when the client hangs up',
    async () => {
      const hangUp = new AbortController();
      const w = nextWaiting();
      try {
        const pending = (post(api, t.key, uniq('idem'), `wait=${WAIT_S}`, hangUp.signal) as Promise<Response>)
          // The abort rejects it; what matters is the server's side.
          .catch(() => undefined);
        await w.waiting;
        expect(waits.waiting).toBe(1);
        hangUp.abort();
        await pending;
        // Only the hang-up can end this wait before its 30 s (no re-read is ever due).
        await until('the wait to end', () => waits.waiting === 0, { timeoutMs: TEST_MS - 5_000 });
      } finally {
        w.restore();
      }
    },
    TEST_MS,
  );

  it('a Prefer it cannot use is ignored: the usual 202 at once, never a 400', async () => {
    const readUntil = vi.spyOn(waits, 'readUntil');
    try {
      for (const prefer of [
        'wait=abc',
        'wait',
        'wait=1.5',
        'wait=-1',
        'wait=""',
        'respond-async',
        '"wait=5',
        'wait=5 x',
        ';;;',
      ]) {
        const res = (await post(api, t.key, uniq('idem'), prefer)) as Res;
        expect(res.status, prefer).toBe(202);
        expect(res.headers.get('preference-applied'), prefer).toBeNull();
        expect(res.headers.get('vary'), prefer).toBe('Prefer');
      }
      expect(readUntil).not.toHaveBeenCalled();
    } finally {
      readUntil.mockRestore();
    }
  });

  it('wait=0 reads the order once: the 202 for an order still running', async () => {
    const res = (await post(api, t.key, uniq('idem'), 'wait=0')) as Res;
    expect(res.status).toBe(202);
    expect(res.headers.get('preference-applied')).toBe('wait=0');
  });
});

describe('Prefer: wait under a short idle timeout', () => {
  let api: TestApi;
  let t: { tenantId: string; key: string };

  beforeAll(async () => {
    api = await startApi({ env: { API_IDLE_TIMEOUT_MS: '3000' } });
    t = await newTenant(api.pool, 'prefer-idle-timeout');
  });
  afterAll(async () => api?.close());

  it('waits no longer than the socket stays open, and says so in Preference-Applied', async () => {
    const res = (await post(api, t.key, uniq('idem'), `wait=${WAIT_S}`)) as Res;
    expect(res.status).toBe(202);
    expect(res.headers.get('preference-applied')).toBe('wait=2');
  });
});

describe('parsing Prefer (RFC 7240)', () => {
  it('reads a list of preferences with values and parameters; the first of a name counts', () => {
    expect([...parsePrefer('respond-async, wait=5')]).toEqual([
      ['respond-async', ''],
      ['wait', '5'],
    ]);
    expect(parsePrefer('Wait = "7" ; a=b;c, wait=9').get('wait')).toBe('7');
    expect(parsePrefer(['return=minimal', 'wait=3']).get('wait')).toBe('3');
    // A malformed element is skipped on its own; a quoted comma does not split an element.
    expect(parsePrefer('x="a,b", @bad, wait=4').get('wait')).toBe('4');
    expect(parsePrefer('x="unterminated, wait=4').has('wait')).toBe(false);
    expect(parsePrefer(undefined).size).toBe(0);
  });

  it('wait is 1*DIGIT seconds, clamped to 30; anything else is no wait', () => {
    expect(preferredWaitSeconds('wait=0')).toBe(0);
    expect(preferredWaitSeconds('wait=010')).toBe(10);
    expect(preferredWaitSeconds('wait=31')).toBe(30);
    expect(preferredWaitSeconds(`wait=${'9'.repeat(400)}`)).toBe(30);
    for (const bad of ['wait=', 'wait=1e3', 'wait=+5', 'wait=5s', 'wait=-1', 'wait=1.5', 'wait="x"']) {
      expect(preferredWaitSeconds(bad), bad).toBeUndefined();
    }
    expect(preferredWaitSeconds(undefined)).toBeUndefined();
  });
});
