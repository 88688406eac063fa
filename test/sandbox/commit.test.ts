// The sandbox commits an effect (charge + webhook event, or message) and its key's completion in
// one statement, fenced by the claim's token. These tests drive that statement directly against
// Postgres: a lost claim must write nothing, an owned one everything, and only once.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Pool } from '../../src/db/index.ts';
import {
  claimKey,
  commitCharge,
  commitMessage,
  type ChargeRow,
  type KeyCompletion,
  type MessageRow,
  type Scope,
} from '../../dev/sandbox/sql.ts';
import { testPool, uniq } from '../support/env.ts';

describe('sandbox: effect and key completion in one fenced statement', () => {
  let pool: Pool;
  const account = uniq('acct');
  beforeAll(() => {
    pool = testPool(2);
  });
  afterAll(async () => {
    await pool?.end();
  });

  async function claim(scope: Scope, key: string): Promise<string> {
    const token = randomUUID();
    const now = new Date();
    const outcome = await claimKey(pool, {
      account,
      scope,
      key,
      fingerprint: 'fp',
      token,
      now,
      lockedUntil: new Date(now.getTime() + 60_000),
      retentionMs: 86_400_000,
    });
    expect(outcome).toEqual({ kind: 'claimed', token });
    return token;
  }

  const completion = (scope: Scope, key: string, token: string, body: unknown): KeyCompletion => ({
    account,
    scope,
    key,
    token,
    response: { status: 200, body },
    now: new Date(),
  });

  const chargeRow = (key: string): ChargeRow => ({
    id: uniq('ch'),
    idempotency_key: key,
    amount: 1250,
    currency: 'eur',
    status: 'succeeded',
    failure_code: null,
    payment_method: 'pm_card_visa',
    description: null,
    receipt_email: 'a@b.co',
    metadata: { order_id: 'ord_1', tenant_id: 't' },
    created_at: new Date('2026-12-01T10:00:00.123Z'),
  });

  const eventFor = (charge: ChargeRow) => ({
    id: uniq('evt'),
    type: 'charge.succeeded',
    object: { id: charge.id, idempotency_key: charge.idempotency_key },
  });

  async function rows(key: string) {
    const charges = await pool.query(
      'select id, amount, metadata, created_at from sandbox.charges where account = $1 and idempotency_key = $2',
      [account, key],
    );
    const events = await pool.query(
      `select id, type, object, created_at from sandbox.webhook_events
        where account = $1 and object->>'idempotency_key' = $2`,
      [account, key],
    );
    const keyRow = await pool.query(
      'select state, response_status, response_body from sandbox.idempotency_keys where account = $1 and scope = $2 and key = $3',
      [account, 'charges', key],
    );
    return { charges: charges.rows, events: events.rows, key: keyRow.rows[0] };
  }

  it('a lost claim (another token) writes neither the charge, nor its event, nor the response', async () => {
    const key = uniq('k');
    await claim('charges', key);
    const charge = chargeRow(key);
    const event = eventFor(charge);
    const owned = await commitCharge(
      pool,
      completion('charges', key, randomUUID(), { id: charge.id }),
      charge,
      event,
    );
    expect(owned).toBe(false);
    const after = await rows(key);
    expect(after.charges).toEqual([]);
    expect(after.events).toEqual([]);
    expect(after.key).toEqual({ state: 'processing', response_status: null, response_body: null });
  });

  it('the owner writes the charge, its event and the response together, once', async () => {
    const key = uniq('k');
    const token = await claim('charges', key);
    const charge = chargeRow(key);
    const event = eventFor(charge);
    const c = completion('charges', key, token, { id: charge.id, amount: 1250 });
    expect(await commitCharge(pool, c, charge, event)).toBe(true);
    const after = await rows(key);
    expect(after.charges).toEqual([
      { id: charge.id, amount: 1250, metadata: charge.metadata, created_at: charge.created_at },
    ]);
    expect(after.events).toEqual([
      { id: event.id, type: 'charge.succeeded', object: event.object, created_at: charge.created_at },
    ]);
    expect(after.key).toEqual({
      state: 'completed',
      response_status: 200,
      response_body: { id: charge.id, amount: 1250 },
    });

    // The same owner again (a duplicate commit): the key is no longer processing, nothing more is written.
    const again = { ...chargeRow(key), id: uniq('ch') };
    expect(await commitCharge(pool, c, again, { ...event, id: uniq('evt') })).toBe(false);
    const final = await rows(key);
    expect(final.charges).toHaveLength(1);
    expect(final.events).toHaveLength(1);
  });

  it('a failing insert commits nothing: the key stays processing for the owner to release', async () => {
    const key = uniq('k');
    const token = await claim('charges', key);
    const charge = { ...chargeRow(key), amount: -5 }; // violates amount > 0
    const event = eventFor(charge);
    await expect(
      commitCharge(pool, completion('charges', key, token, { id: charge.id }), charge, event),
    ).rejects.toMatchObject({ code: '23514' });
    const after = await rows(key);
    expect(after.charges).toEqual([]);
    expect(after.events).toEqual([]);
    expect(after.key).toEqual({ state: 'processing', response_status: null, response_body: null });
  });

  it('messages: a lost claim writes nothing; the owner writes the message and the response', async () => {
    const key = uniq('k');
    const token = await claim('messages', key);
    const message: MessageRow = {
      id: uniq('msg'),
      idempotency_key: key,
      to_address: 'a@b.co',
      subject: 'Your receipt',
      body_text: 'Thanks',
      metadata: { order_id: 'ord_2' },
      created_at: new Date('2026-12-01T11:00:00.456Z'),
    };
    const count = async () =>
      (
        await pool.query<{ n: number }>(
          'select count(*)::int as n from sandbox.messages where account = $1 and idempotency_key = $2',
          [account, key],
        )
      ).rows[0]!.n;
    expect(await commitMessage(pool, completion('messages', key, randomUUID(), {}), message)).toBe(false);
    expect(await count()).toBe(0);
    expect(await commitMessage(pool, completion('messages', key, token, { id: message.id }), message)).toBe(
      true,
    );
    expect(await count()).toBe(1);
    const stored = await pool.query(
      'select state, response_body from sandbox.idempotency_keys where account = $1 and scope = $2 and key = $3',
      [account, 'messages', key],
    );
    expect(stored.rows[0]).toEqual({ state: 'completed', response_body: { id: message.id } });
  });
});
