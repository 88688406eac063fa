/**
 * The sandbox's SQL: one exported function per statement, client first so it
 * can join a caller's transaction, parameterised, explicit `returning`.
 * Everything is scoped by `account` (see dev/sandbox/migrations/).
 */
import type { Queryable } from '../../src/db/index.ts';

export type Scope = 'charges' | 'messages' | 'refunds';
export type FaultEndpoint =
  | 'charges.create'
  | 'charges.lookup'
  | 'messages.create'
  | 'messages.lookup'
  | 'refunds.create'
  | 'refunds.lookup';
export type FaultKind = 'fail_before' | 'fail_after' | 'drop_after' | 'delay';

// ---------------------------------------------------------------- idempotency

export interface StoredResponse {
  status: number;
  body: unknown;
}

export type ClaimOutcome =
  | { kind: 'claimed'; token: string }
  | { kind: 'completed'; fingerprint: string; response: StoredResponse }
  | { kind: 'processing'; fingerprint: string };

/**
 * Claims (account, scope, key) for this request in one atomic statement: the
 * primary key is the lock, so two concurrent requests can't both claim. An
 * existing row is taken over only when it is dead: a 'processing' claim whose
 * lease ran out (its request died before its effect committed: the effect and
 * the completion commit together, and the fencing token stops a late
 * completion), or a 'completed' key older than the retention window.
 * Returns null if the row vanished between the two statements (released); the
 * caller retries.
 */
export async function claimKey(db: Queryable, args: ClaimArgs): Promise<ClaimOutcome | null> {
  const claimed = await db.query({
    name: 'sandbox_claim_key',
    text: `insert into sandbox.idempotency_keys
       (account, scope, key, fingerprint, state, token, locked_until, created_at)
     values ($1, $2, $3, $4, 'processing', $5, $6, $7)
     ${CLAIM_CONFLICT}
     returning token`,
    values: claimValues(args),
  });
  if (claimed.rowCount === 1) return { kind: 'claimed', token: args.token };
  return readClaim(db, args);
}

export interface ClaimArgs {
  account: string;
  scope: Scope;
  key: string;
  fingerprint: string;
  token: string;
  now: Date;
  lockedUntil: Date;
  retentionMs: number;
}

/** Takes over a dead claim or an expired completed key; anything else stays (see claimKey). */
const CLAIM_CONFLICT = `on conflict (account, scope, key) do update
       set fingerprint = excluded.fingerprint, state = 'processing', token = excluded.token,
           locked_until = excluded.locked_until, created_at = excluded.created_at,
           response_status = null, response_body = null, completed_at = null
       where (sandbox.idempotency_keys.state = 'processing' and sandbox.idempotency_keys.locked_until < $7)
          or (sandbox.idempotency_keys.state = 'completed' and sandbox.idempotency_keys.created_at < $8)`;

function claimValues(args: ClaimArgs): unknown[] {
  return [
    args.account,
    args.scope,
    args.key,
    args.fingerprint,
    args.token,
    args.lockedUntil,
    args.now,
    new Date(args.now.getTime() - args.retentionMs),
  ];
}

/** The key's row, when the claim did not insert or take it over; null if it vanished meanwhile (released). */
async function readClaim(db: Queryable, args: ClaimArgs): Promise<ClaimOutcome | null> {
  const existing = await db.query<{
    fingerprint: string;
    state: 'processing' | 'completed';
    response_status: number | null;
    response_body: unknown;
  }>({
    name: 'sandbox_read_key',
    text: `select fingerprint, state, response_status, response_body
       from sandbox.idempotency_keys where account = $1 and scope = $2 and key = $3`,
    values: [args.account, args.scope, args.key],
  });
  const row = existing.rows[0];
  if (!row) return null;
  if (row.state === 'processing' || row.response_status === null) {
    return { kind: 'processing', fingerprint: row.fingerprint };
  }
  return {
    kind: 'completed',
    fingerprint: row.fingerprint,
    response: { status: row.response_status, body: row.response_body },
  };
}

/**
 * A create request's first statement: takes one use of the endpoint's oldest
 * active fault (as consumeFault) and, unless that fault is `fail_before`
 * (nothing may happen), claims the key (as claimKey), in one round trip. A
 * `delay` fault lengthens the claim's lease by its delay, so a slow request
 * is never taken over. `claim` is null only when the key's row vanished
 * between the claim and the read (released): the caller claims again.
 */
export async function takeFaultAndClaimKey(
  db: Queryable,
  args: ClaimArgs & { endpoint: FaultEndpoint },
): Promise<{ fault: { kind: FaultKind; delay_ms: number | null } | null; claim: ClaimOutcome | null }> {
  const { rows } = await db.query<{
    fault_kind: FaultKind | null;
    fault_delay_ms: number | null;
    claimed: boolean;
  }>({
    name: 'sandbox_fault_and_claim',
    text: `with fault as (${takeFaultSql('$1', '$9::text')}),
             claim as (
               insert into sandbox.idempotency_keys
                 (account, scope, key, fingerprint, state, token, locked_until, created_at)
               select $1::text, $2::text, $3::text, $4::text, 'processing', $5::uuid,
                      $6::timestamptz
                        + coalesce((select delay_ms from fault where kind = 'delay'), 0) * interval '1 millisecond',
                      $7::timestamptz
                where not exists (select from fault where kind = 'fail_before')
               ${CLAIM_CONFLICT}
               returning token)
             select (select kind from fault) as fault_kind, (select delay_ms from fault) as fault_delay_ms,
                    exists (select from claim) as claimed`,
    values: [...claimValues(args), args.endpoint],
  });
  const row = rows[0]!;
  const fault = row.fault_kind ? { kind: row.fault_kind, delay_ms: row.fault_delay_ms } : null;
  if (fault?.kind === 'fail_before') return { fault, claim: null };
  if (row.claimed) return { fault, claim: { kind: 'claimed', token: args.token } };
  return { fault, claim: await readClaim(db, args) };
}

/** What completes an owned key: the final response, stored for replays. */
export interface KeyCompletion {
  account: string;
  scope: Scope;
  key: string;
  token: string;
  response: StoredResponse;
  now: Date;
}

/**
 * The completion of the key as the first part of a statement ($1-$7): the
 * effect's inserts that follow read from `done`, so they happen only if this
 * token still owns the claim, and the whole statement commits or fails as one.
 */
const COMPLETE_KEY_CTE = `done as (
    update sandbox.idempotency_keys
       set state = 'completed', response_status = $5, response_body = $6, completed_at = $7
     where account = $1 and scope = $2 and key = $3 and token = $4 and state = 'processing'
     returning key)`;

function completionValues(c: KeyCompletion): unknown[] {
  return [c.account, c.scope, c.key, c.token, c.response.status, JSON.stringify(c.response.body), c.now];
}

/** Gives an unfinished claim back (the effect did not commit), so a retry runs normally. */
export async function releaseKey(
  db: Queryable,
  args: { account: string; scope: Scope; key: string; token: string },
): Promise<void> {
  await db.query(
    `delete from sandbox.idempotency_keys
      where account = $1 and scope = $2 and key = $3 and token = $4 and state = 'processing'
      returning key`,
    [args.account, args.scope, args.key, args.token],
  );
}

// -------------------------------------------------------------------- charges

export interface ChargeRow {
  id: string;
  idempotency_key: string;
  amount: number;
  currency: string;
  status: 'succeeded' | 'failed';
  failure_code: string | null;
  payment_method: string;
  description: string | null;
  receipt_email: string | null;
  metadata: Record<string, string>;
  created_at: Date;
}

const CHARGE_COLUMNS = `id, idempotency_key, amount, currency, status, failure_code, payment_method,
  description, receipt_email, metadata, created_at`;

/**
 * A charge, its webhook event (the outbox row: an event exists iff the charge
 * does; it is stamped with the charge's time) and the key's completion, in
 * one autocommitted statement. Returns false, with nothing written, if the
 * claim was lost.
 */
export async function commitCharge(
  db: Queryable,
  c: KeyCompletion,
  charge: ChargeRow,
  event: { id: string; type: string; object: unknown },
): Promise<boolean> {
  const { rows } = await db.query<{ owned: boolean }>({
    name: 'sandbox_commit_charge',
    text: `with ${COMPLETE_KEY_CTE},
      charge as (
        insert into sandbox.charges (account, ${CHARGE_COLUMNS})
        select $1, $8::text, $9::text, $10::int, $11::text, $12::text, $13::text, $14::text, $15::text,
               $16::text, $17::jsonb, $21::timestamptz
          from done
        returning id),
      event as (
        insert into sandbox.webhook_events (account, id, type, object, created_at, next_attempt_at)
        select $1, $18::text, $19::text, $20::jsonb, $21::timestamptz, $21::timestamptz
          from charge
        returning id)
      select exists (select 1 from done) as owned`,
    values: [
      ...completionValues(c),
      charge.id,
      charge.idempotency_key,
      charge.amount,
      charge.currency,
      charge.status,
      charge.failure_code,
      charge.payment_method,
      charge.description,
      charge.receipt_email,
      JSON.stringify(charge.metadata),
      event.id,
      event.type,
      JSON.stringify(event.object),
      charge.created_at,
    ],
  });
  return rows[0]!.owned;
}

/** The most recent charge made under this key (a key reused after the retention window may have several). */
export async function findChargeByKey(
  db: Queryable,
  account: string,
  key: string,
): Promise<ChargeRow | null> {
  const { rows } = await db.query<ChargeRow>(
    `select ${CHARGE_COLUMNS} from sandbox.charges
      where account = $1 and idempotency_key = $2 order by created_at desc, id desc limit 1`,
    [account, key],
  );
  return rows[0] ?? null;
}

export interface AuditFilter {
  orderId?: string | undefined;
  tenantId?: string | undefined;
  idempotencyKey?: string | undefined;
}

export async function listCharges(db: Queryable, account: string, f: AuditFilter): Promise<ChargeRow[]> {
  const { rows } = await db.query<ChargeRow>(
    `select ${CHARGE_COLUMNS} from sandbox.charges
      where account = $1
        and ($2::text is null or metadata ->> 'order_id' = $2)
        and ($3::text is null or metadata ->> 'tenant_id' = $3)
        and ($4::text is null or idempotency_key = $4)
      order by created_at, id`,
    [account, f.orderId ?? null, f.tenantId ?? null, f.idempotencyKey ?? null],
  );
  return rows;
}

// ------------------------------------------------------------------- messages

export interface MessageRow {
  id: string;
  idempotency_key: string;
  to_address: string;
  subject: string;
  body_text: string;
  metadata: Record<string, string>;
  created_at: Date;
}

const MESSAGE_COLUMNS = `id, idempotency_key, to_address, subject, body_text, metadata, created_at`;

/** A message and the key's completion in one autocommitted statement; false, with nothing written, if the claim was lost. */
export async function commitMessage(db: Queryable, c: KeyCompletion, m: MessageRow): Promise<boolean> {
  const { rows } = await db.query<{ owned: boolean }>({
    name: 'sandbox_commit_message',
    text: `with ${COMPLETE_KEY_CTE},
      message as (
        insert into sandbox.messages (account, ${MESSAGE_COLUMNS})
        select $1, $8::text, $9::text, $10::text, $11::text, $12::text, $13::jsonb, $14::timestamptz
          from done
        returning id)
      select exists (select 1 from done) as owned`,
    values: [
      ...completionValues(c),
      m.id,
      m.idempotency_key,
      m.to_address,
      m.subject,
      m.body_text,
      JSON.stringify(m.metadata),
      m.created_at,
    ],
  });
  return rows[0]!.owned;
}

export async function findMessageByKey(
  db: Queryable,
  account: string,
  key: string,
): Promise<MessageRow | null> {
  const { rows } = await db.query<MessageRow>(
    `select ${MESSAGE_COLUMNS} from sandbox.messages
      where account = $1 and idempotency_key = $2 order by created_at desc, id desc limit 1`,
    [account, key],
  );
  return rows[0] ?? null;
}

export async function listMessages(db: Queryable, account: string, f: AuditFilter): Promise<MessageRow[]> {
  const { rows } = await db.query<MessageRow>(
    `select ${MESSAGE_COLUMNS} from sandbox.messages
      where account = $1
        and ($2::text is null or metadata ->> 'order_id' = $2)
        and ($3::text is null or metadata ->> 'tenant_id' = $3)
        and ($4::text is null or idempotency_key = $4)
      order by created_at, id`,
    [account, f.orderId ?? null, f.tenantId ?? null, f.idempotencyKey ?? null],
  );
  return rows;
}

// --------------------------------------------------------------------- faults

export interface FaultRow {
  id: string;
  endpoint: FaultEndpoint;
  kind: FaultKind;
  remaining: number;
  delay_ms: number | null;
  created_at: Date;
}

export async function insertFault(
  db: Queryable,
  account: string,
  f: { endpoint: FaultEndpoint; kind: FaultKind; count: number; delayMs: number | null },
): Promise<FaultRow> {
  const { rows } = await db.query<FaultRow>(
    `insert into sandbox.faults (account, endpoint, kind, remaining, delay_ms)
     values ($1, $2, $3, $4, $5)
     returning id, endpoint, kind, remaining, delay_ms, created_at`,
    [account, f.endpoint, f.kind, f.count, f.delayMs],
  );
  return rows[0]!;
}

/**
 * Takes one use of the oldest active fault for this endpoint. The decrement is
 * conditional (`remaining > 0`) and runs under the row lock, so two concurrent
 * requests can't both consume a fault with one use left: the second re-checks
 * the condition after the first commits and gets nothing.
 */
export async function consumeFault(
  db: Queryable,
  account: string,
  endpoint: FaultEndpoint,
): Promise<{ kind: FaultKind; delay_ms: number | null } | null> {
  const { rows } = await db.query<{ kind: FaultKind; delay_ms: number | null }>(takeFaultSql('$1', '$2'), [
    account,
    endpoint,
  ]);
  return rows[0] ?? null;
}

/** consumeFault's statement, with the placeholders of account and endpoint (also a CTE of takeFaultAndClaimKey). */
function takeFaultSql(account: string, endpoint: string): string {
  return `update sandbox.faults set remaining = remaining - 1
      where id = (select id from sandbox.faults
                   where account = ${account} and endpoint = ${endpoint} and remaining > 0
                   order by id limit 1
                   for update)
        and remaining > 0
      returning kind, delay_ms`;
}

export async function listFaults(db: Queryable, account: string): Promise<FaultRow[]> {
  const { rows } = await db.query<FaultRow>(
    `select id, endpoint, kind, remaining, delay_ms, created_at from sandbox.faults where account = $1 order by id`,
    [account],
  );
  return rows;
}

export async function deleteFaults(db: Queryable, account: string): Promise<number> {
  const { rowCount } = await db.query(`delete from sandbox.faults where account = $1 returning id`, [
    account,
  ]);
  return rowCount ?? 0;
}

// ------------------------------------------------------------------- webhooks

export interface WebhookConfigRow {
  url: string | null;
  enabled: boolean;
  duplicate: boolean;
  reorder: boolean;
}

const DEFAULT_WEBHOOK_CONFIG: WebhookConfigRow = {
  url: null,
  enabled: true,
  duplicate: false,
  reorder: false,
};

export async function getWebhookConfig(db: Queryable, account: string): Promise<WebhookConfigRow> {
  const { rows } = await db.query<WebhookConfigRow>({
    name: 'sandbox_webhook_config',
    text: `select url, enabled, duplicate, reorder from sandbox.webhook_config where account = $1`,
    values: [account],
  });
  return rows[0] ?? DEFAULT_WEBHOOK_CONFIG;
}

/** Upserts only the fields given (undefined = keep; url null = back to the process default). */
export async function updateWebhookConfig(
  db: Queryable,
  account: string,
  patch: { url?: string | null; enabled?: boolean; duplicate?: boolean; reorder?: boolean },
): Promise<WebhookConfigRow> {
  const { rows } = await db.query<WebhookConfigRow>(
    `insert into sandbox.webhook_config as c (account, url, enabled, duplicate, reorder, updated_at)
     values ($1, $3, coalesce($4, true), coalesce($5, false), coalesce($6, false), now())
     on conflict (account) do update
       set url = case when $2 then excluded.url else c.url end,
           enabled = coalesce($4, c.enabled),
           duplicate = coalesce($5, c.duplicate),
           reorder = coalesce($6, c.reorder),
           updated_at = now()
     returning url, enabled, duplicate, reorder`,
    [
      account,
      patch.url !== undefined,
      patch.url ?? null,
      patch.enabled ?? null,
      patch.duplicate ?? null,
      patch.reorder ?? null,
    ],
  );
  return rows[0]!;
}

export interface WebhookEventRow {
  id: string;
  seq: string;
  type: string;
  object: unknown;
  created_at: Date;
  state: 'pending' | 'delivered' | 'failed';
  attempts: number;
  deliveries: number;
  next_attempt_at: Date;
  last_status: number | null;
  last_error: string | null;
  delivered_at: Date | null;
}

const EVENT_COLUMNS = `id, seq, type, object, created_at, state, attempts, deliveries, next_attempt_at,
  last_status, last_error, delivered_at`;

/** The delivery settings a pass of the dispatcher works with: the account's, or the defaults. */
export interface DeliveryConfig {
  /** The account's URL, else the process default. */
  url: string;
  duplicate: boolean;
  reorder: boolean;
}

/**
 * Leases up to `limit` due events to this dispatcher, if the account's
 * delivery is enabled and has a URL (its own, else `defaultUrl`), and returns
 * them with that configuration: one statement, and one snapshot, for both.
 * Nothing is leased otherwise (events wait, pending), and the configuration
 * is null whenever nothing was leased. A missing settings row means the
 * column defaults (DEFAULT_WEBHOOK_CONFIG). SKIP LOCKED plus the
 * lease lets several dispatchers (processes) share one outbox without
 * delivering the same attempt twice; a dispatcher that dies mid-delivery
 * loses its lease and the event is retried (at least once).
 */
export async function leaseDueEvents(
  db: Queryable,
  args: { account: string; now: Date; leaseUntil: Date; limit: number; defaultUrl: string | null },
): Promise<{ events: WebhookEventRow[]; config: DeliveryConfig | null }> {
  const { rows } = await db.query<
    WebhookEventRow & { cfg_url: string; cfg_duplicate: boolean; cfg_reorder: boolean }
  >({
    name: 'sandbox_lease_due_events',
    text: `with cfg as (
        select coalesce(c.url, $5::text) as url, coalesce(c.enabled, true) as enabled,
               coalesce(c.duplicate, false) as duplicate, coalesce(c.reorder, false) as reorder
          from (select 1) as one left join sandbox.webhook_config c on c.account = $1
      ), leased as (
        update sandbox.webhook_events
           set locked_until = $3, attempts = attempts + 1
         where id in (select id from sandbox.webhook_events
                       where account = $1 and state = 'pending' and next_attempt_at <= $2
                         and (locked_until is null or locked_until <= $2)
                       order by seq limit $4
                       for update skip locked)
           and exists (select 1 from cfg where enabled and url is not null)
        returning ${EVENT_COLUMNS})
      select leased.*, cfg.url as cfg_url, cfg.duplicate as cfg_duplicate, cfg.reorder as cfg_reorder
        from leased cross join cfg`,
    values: [args.account, args.now, args.leaseUntil, args.limit, args.defaultUrl],
  });
  const first = rows[0];
  if (!first) return { events: [], config: null };
  const config = { url: first.cfg_url, duplicate: first.cfg_duplicate, reorder: first.cfg_reorder };
  const events = rows
    .map(({ cfg_url: _u, cfg_duplicate: _d, cfg_reorder: _r, ...event }) => event)
    .sort((a, b) => Number(a.seq) - Number(b.seq));
  return { events, config };
}

export async function markEventDelivered(
  db: Queryable,
  args: { account: string; id: string; status: number; now: Date; deliveries: number },
): Promise<void> {
  await db.query({
    name: 'sandbox_event_delivered',
    text: `update sandbox.webhook_events
        set state = 'delivered', last_status = $3, last_error = null, delivered_at = $4,
            deliveries = deliveries + $5, locked_until = null
      where account = $1 and id = $2
      returning id`,
    values: [args.account, args.id, args.status, args.now, args.deliveries],
  });
}

/** Schedules a retry, or marks the event 'failed' (kept, visible) once attempts are exhausted. */
export async function markEventAttemptFailed(
  db: Queryable,
  args: {
    account: string;
    id: string;
    status: number | null;
    error: string;
    nextAttemptAt: Date;
    maxAttempts: number;
  },
): Promise<void> {
  await db.query(
    `update sandbox.webhook_events
        set state = case when attempts >= $6 then 'failed' else 'pending' end,
            last_status = $3, last_error = $4, next_attempt_at = $5, locked_until = null
      where account = $1 and id = $2 and state = 'pending'
      returning id`,
    [args.account, args.id, args.status, args.error, args.nextAttemptAt, args.maxAttempts],
  );
}

export async function getWebhookEvent(
  db: Queryable,
  account: string,
  id: string,
): Promise<WebhookEventRow | null> {
  const { rows } = await db.query<WebhookEventRow>(
    `select ${EVENT_COLUMNS} from sandbox.webhook_events where account = $1 and id = $2`,
    [account, id],
  );
  return rows[0] ?? null;
}

/** Records a manual redelivery's outcome; a success settles a pending or failed event. */
export async function recordRedelivery(
  db: Queryable,
  args: { account: string; id: string; status: number | null; error: string | null; ok: boolean; now: Date },
): Promise<void> {
  await db.query(
    `update sandbox.webhook_events
        set attempts = attempts + 1,
            deliveries = deliveries + case when $5 then 1 else 0 end,
            state = case when $5 then 'delivered' else state end,
            delivered_at = case when $5 then $6 else delivered_at end,
            last_status = $3, last_error = $4
      where account = $1 and id = $2
      returning id`,
    [args.account, args.id, args.status, args.error, args.ok, args.now],
  );
}

export async function listWebhookEvents(
  db: Queryable,
  account: string,
  state: string | undefined,
): Promise<WebhookEventRow[]> {
  const { rows } = await db.query<WebhookEventRow>(
    `select ${EVENT_COLUMNS} from sandbox.webhook_events
      where account = $1 and ($2::text is null or state = $2) order by seq`,
    [account, state ?? null],
  );
  return rows;
}

// -------------------------------------------------------------------- refunds

export interface RefundRow {
  id: string;
  idempotency_key: string;
  charge_id: string;
  amount: number;
  currency: string;
  status: 'succeeded' | 'failed';
  reason: string | null;
  metadata: Record<string, string>;
  created_at: Date;
}

const REFUND_COLUMNS = `id, idempotency_key, charge_id, amount, currency, status, reason, metadata, created_at`;

/**
 * A refund, its webhook event (the outbox row: an event exists iff the refund
 * does) and the key's completion, in one autocommitted statement; false, with
 * nothing written, if the claim was lost.
 */
export async function commitRefund(
  db: Queryable,
  c: KeyCompletion,
  r: RefundRow,
  event: { id: string; type: string; object: unknown },
): Promise<boolean> {
  const { rows } = await db.query<{ owned: boolean }>({
    name: 'sandbox_commit_refund',
    text: `with ${COMPLETE_KEY_CTE},
      refund as (
        insert into sandbox.refunds (account, ${REFUND_COLUMNS})
        select $1, $8::text, $9::text, $10::text, $11::int, $12::text, $13::text, $14::text, $15::jsonb,
               $16::timestamptz
          from done
        returning id),
      event as (
        insert into sandbox.webhook_events (account, id, type, object, created_at, next_attempt_at)
        select $1, $17::text, $18::text, $19::jsonb, $16::timestamptz, $16::timestamptz
          from refund
        returning id)
      select exists (select 1 from done) as owned`,
    values: [
      ...completionValues(c),
      r.id,
      r.idempotency_key,
      r.charge_id,
      r.amount,
      r.currency,
      r.status,
      r.reason,
      JSON.stringify(r.metadata),
      r.created_at,
      event.id,
      event.type,
      JSON.stringify(event.object),
    ],
  });
  return rows[0]!.owned;
}

/**
 * Completes the key with a refusal (no effect), as a provider stores a
 * request it refused after claiming its key: a retry under the key replays it.
 */
export async function commitRefusal(db: Queryable, c: KeyCompletion): Promise<boolean> {
  const { rows } = await db.query<{ owned: boolean }>({
    name: 'sandbox_commit_refusal',
    text: `with ${COMPLETE_KEY_CTE} select exists (select 1 from done) as owned`,
    values: completionValues(c),
  });
  return rows[0]!.owned;
}

export async function findRefundByKey(
  db: Queryable,
  account: string,
  key: string,
): Promise<RefundRow | null> {
  const { rows } = await db.query<RefundRow>(
    `select ${REFUND_COLUMNS} from sandbox.refunds
      where account = $1 and idempotency_key = $2 order by created_at desc, id desc limit 1`,
    [account, key],
  );
  return rows[0] ?? null;
}

/** A charge of this account by ID, with the sum of its succeeded refunds. */
export async function findChargeForRefund(
  db: Queryable,
  account: string,
  chargeId: string,
): Promise<{ amount: number; currency: string; status: string; refunded: number } | null> {
  const { rows } = await db.query<{ amount: number; currency: string; status: string; refunded: number }>(
    `select c.amount, c.currency, c.status,
            (select coalesce(sum(r.amount), 0)::int from sandbox.refunds r
              where r.account = c.account and r.charge_id = c.id and r.status = 'succeeded') as refunded
       from sandbox.charges c where c.account = $1 and c.id = $2`,
    [account, chargeId],
  );
  return rows[0] ?? null;
}

/**
 * One page of a charge's refunds, newest first (Stripe's list order), made no
 * later than `visibleBefore` (the Stripe surface's declared listing lag), after
 * the refund `startingAfter` when given. One row more than `limit` tells the
 * caller there is more.
 */
export async function listRefundsOfCharge(
  db: Queryable,
  account: string,
  f: { chargeId: string; visibleBefore: Date; startingAfter: string | undefined; limit: number },
): Promise<RefundRow[]> {
  const { rows } = await db.query<RefundRow>(
    `select ${REFUND_COLUMNS} from sandbox.refunds r
      where account = $1 and charge_id = $2 and created_at <= $3
        and ($4::text is null or (created_at, id) < (select created_at, id from sandbox.refunds
                                                      where account = $1 and id = $4))
      order by created_at desc, id desc
      limit $5`,
    [account, f.chargeId, f.visibleBefore, f.startingAfter ?? null, f.limit + 1],
  );
  return rows;
}

export async function listRefunds(db: Queryable, account: string, f: AuditFilter): Promise<RefundRow[]> {
  const { rows } = await db.query<RefundRow>(
    `select ${REFUND_COLUMNS} from sandbox.refunds
      where account = $1
        and ($2::text is null or metadata ->> 'order_id' = $2)
        and ($3::text is null or metadata ->> 'tenant_id' = $3)
        and ($4::text is null or idempotency_key = $4)
      order by created_at, id`,
    [account, f.orderId ?? null, f.tenantId ?? null, f.idempotencyKey ?? null],
  );
  return rows;
}

// ---------------------------------------------------------------------- reset

/** Wipes everything this account has. Callers run it in one transaction. */
export async function resetAccount(db: Queryable, account: string): Promise<void> {
  for (const table of [
    'idempotency_keys',
    'charges',
    'messages',
    'refunds',
    'faults',
    'webhook_config',
    'webhook_events',
  ]) {
    await db.query(`delete from sandbox.${table} where account = $1`, [account]);
  }
}

// --------------------------------------------------------- the chaos harness

/** Every charge that really happened, in any account: the chaos harness's ground truth for money moved. */
export async function selectAllChargeEffects(
  db: Queryable,
): Promise<{ idempotency_key: string; order_id: string | null; status: string }[]> {
  const { rows } = await db.query<{ idempotency_key: string; order_id: string | null; status: string }>(
    `select idempotency_key, metadata ->> 'order_id' as order_id, status from sandbox.charges`,
  );
  return rows;
}

/** Every message that was really sent, in any account. */
export async function selectAllMessageEffects(
  db: Queryable,
): Promise<{ idempotency_key: string; order_id: string | null }[]> {
  const { rows } = await db.query<{ idempotency_key: string; order_id: string | null }>(
    `select idempotency_key, metadata ->> 'order_id' as order_id from sandbox.messages`,
  );
  return rows;
}
