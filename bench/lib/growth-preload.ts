/**
 * The growth benchmark's preload (bench/growth.ts): a database with a week of
 * realistic history, made set-based in minutes.
 *
 * Realistic by construction: nothing here invents a row's shape. A few real
 * orders go through the running stack first (the templates: completed, and
 * rejected by a declined card); every preloaded order is a copy of one
 * template's rows in every table it wrote (orders, operations,
 * workflow_outbox, webhook_events), with its identities replaced (order ID,
 * workflow ID and so every step key, the Idempotency-Key, the provider's
 * charge and receipt IDs, the event ID), the downstream keys recomputed from
 * the new scopes as the ledger derives them (checked against the templates
 * first), and every timestamp moved to a point of the last 7 days. Columns
 * are read from the catalog, so a column a later migration adds is copied
 * too. A few orders are turned into what a lost charge answer leaves:
 * `needs_attention` (payment_unknown_horizon) with the charge's record
 * `unknown`. Each chunk is one INSERT ... SELECT per table over
 * generate_series. Bench-only: this SQL is not the product's.
 */
import type { PoolClient } from '../../src/db/index.ts';

export interface TemplateOrder {
  tenantId: string;
  orderId: string;
  /** The Idempotency-Key its POST was sent with. */
  idempotencyKey: string;
  kind: 'completed' | 'rejected';
}

export interface PreloadPlan {
  orders: number;
  tenants: readonly string[];
  /** Of every 1,000 orders: rejected, and needs_attention with an unknown charge; the rest complete. */
  perMille: { rejected: number; needsAttention: number };
  /** Orders per INSERT ... SELECT round (progress is printed after each). */
  chunk: number;
  days: number;
}

/** The tables a preloaded order has rows in, and how to find a template order's rows in each. */
const TABLES: { table: string; templateRows: string }[] = [
  { table: 'orders', templateRows: 'x.tenant_id = m.t_tenant and x.id = m.t_order' },
  {
    table: 'operations',
    templateRows: `x.tenant_id = m.t_tenant and (x.key like m.t_workflow || '/%'
                   or (x.operation_type = 'http.create_order' and x.key = m.t_idem))`,
  },
  { table: 'workflow_outbox', templateRows: 'x.workflow_id = m.t_workflow' },
  { table: 'webhook_events', templateRows: 'x.event_id = m.t_event' },
];

/** `'of_' || sha256(canonical JSON [tenant, type, key])`, as src/ledger/canonical.ts's downstreamKey. */
const downstreamKeySql = (tenant: string, type: string, key: string) =>
  `'of_' || encode(sha256(convert_to('[' || to_json(${tenant}::text)::text || ',' || to_json(${type}::text)::text
     || ',' || to_json(${key}::text)::text || ']', 'UTF8')), 'hex')`;

/**
 * Every text occurrence of a template's identities, replaced by the copy's.
 * A NULL identity (a rejected order has no receipt) matches a sentinel that
 * never occurs, so replace() does not turn the whole value NULL.
 */
function substituted(expr: string): string {
  const pairs: [string, string][] = [
    ['m.t_workflow', 'm.workflow_id'],
    ['m.t_order', 'm.order_id'],
    ['m.t_idem', 'm.idem'],
    ['m.t_charge', 'm.charge_id'],
    ['m.t_receipt', 'm.receipt_id'],
    ['m.t_charge_dk', 'm.charge_dk'],
    ['m.t_receipt_dk', 'm.receipt_dk'],
    ['m.t_event', 'm.event_id'],
    [`'"' || m.t_tenant || '"'`, `'"' || m.tenant || '"'`],
  ];
  return pairs.reduce(
    (e, [from, to]) => `replace(${e}, coalesce(${from}, chr(1)), coalesce(${to}, ''))`,
    expr,
  );
}

async function columnsOf(db: PoolClient, table: string): Promise<{ name: string; type: string }[]> {
  const { rows } = await db.query<{ name: string; type: string }>(
    `select column_name as name, data_type as type from information_schema.columns
      where table_schema = 'public' and table_name = $1 and is_generated = 'NEVER'
      order by ordinal_position`,
    [table],
  );
  return rows;
}

/** The SELECT list of a copy: identities replaced, times moved, the rest as the template has it. */
function copyExpression(c: { name: string; type: string }): string {
  const col = `x.${c.name}`;
  if (c.name === 'tenant_id') return 'm.tenant';
  if (c.type === 'timestamp with time zone') return `${col} + m.shift`;
  if (c.type === 'text' || c.type === 'character varying') return substituted(col);
  if (c.type === 'json' || c.type === 'jsonb') return `${substituted(`${col}::text`)}::${c.type}`;
  return col;
}

/**
 * Fills the database behind `db` (the templates' rows already in it) with
 * `plan.orders` copies. `say` gets a progress line per chunk.
 */
export async function preload(
  db: PoolClient,
  templates: TemplateOrder[],
  plan: PreloadPlan,
  say: (line: string) => void,
): Promise<{ seconds: number; rows: Record<string, number> }> {
  const t0 = performance.now();
  // Minutes of statements, on a connection of the bench's own: no pool's statement timeout.
  await db.query('set statement_timeout = 0');
  // The templates, with every identity their rows carry.
  await db.query(`create temp table growth_templates (
      slot int, kind text, t_tenant text, t_order text, t_workflow text, t_idem text,
      t_charge text, t_receipt text, t_charge_dk text, t_receipt_dk text, t_event text, t_created timestamptz)`);
  for (const t of templates) {
    await db.query(
      `insert into growth_templates
       select $4::int, $5, o.tenant_id, o.id, o.workflow_id, $3, o.charge_id, o.receipt_id,
              (select downstream_key from operations where tenant_id = o.tenant_id
                  and operation_type = 'payment.charge' and key = o.workflow_id || '/charge'),
              (select downstream_key from operations where tenant_id = o.tenant_id
                  and operation_type = 'email.receipt' and key = o.workflow_id || '/receipt'),
              (select min(event_id) from webhook_events where order_id = o.id and tenant_id = o.tenant_id),
              o.created_at
         from orders o where o.tenant_id = $1 and o.id = $2`,
      [t.tenantId, t.orderId, t.idempotencyKey, templates.indexOf(t), t.kind],
    );
  }
  // The ledger's downstream key, recomputed here for the copies: it must give the templates' own.
  const check = await db.query<{ wrong: number }>(
    `select count(*)::int as wrong from growth_templates
      where t_charge_dk is distinct from ${downstreamKeySql('t_tenant', "'payment.charge'", "t_workflow || '/charge'")}
         or (t_receipt_dk is not null
             and t_receipt_dk <> ${downstreamKeySql('t_tenant', "'email.receipt'", "t_workflow || '/receipt'")})`,
  );
  if ((check.rows[0]?.wrong ?? 1) !== 0) {
    throw new Error(
      'the preload derives downstream keys differently from the ledger (src/ledger/canonical.ts)',
    );
  }
  const missingEvent = await db.query<{ n: number }>(
    `select count(*)::int as n from growth_templates where t_event is null and kind = 'completed'`,
  );
  if (missingEvent.rows[0]?.n) throw new Error('a completed template order has no webhook event recorded');

  const byKind = (kind: string) => templates.filter((t) => t.kind === kind).length;
  if (byKind('completed') === 0 || byKind('rejected') === 0)
    throw new Error('templates of both kinds needed');
  // Copy n's kind by n % 1000 (rejected first, then needs_attention, then completed), its template
  // round-robin among that kind's, its tenant n % tenants, its time spread evenly over the days
  // (newest last), up to a minute before now.
  await db.query(
    `create temp table growth_map as
     with numbered as (
       select n, case when n % 1000 < $2 then 'rejected'
                      when n % 1000 < $2 + $3 then 'needs_attention'
                      else 'completed' end as kind,
              ($4::text[])[1 + n % cardinality($4::text[])] as tenant,
              now() - interval '1 minute' - ($1 - n)::float8 / $1 * $5 * interval '1 day' as at
         from generate_series(0, $1 - 1) n),
     kinds as (
       select kind, (case kind when 'needs_attention' then 'rejected' else kind end) as template_kind
         from (values ('rejected'), ('needs_attention'), ('completed')) k(kind)),
     ranked as (
       select t.*, row_number() over (partition by kind order by slot) - 1 as k,
              count(*) over (partition by kind) as of from growth_templates t)
     select nm.n, nm.kind, nm.tenant, r.slot, r.t_tenant, r.t_order, r.t_workflow, r.t_idem, r.t_charge, r.t_receipt,
            r.t_charge_dk, r.t_receipt_dk, r.t_event,
            nm.at - r.t_created as shift,
            ids.order_id,
            'order/' || nm.tenant || '/' || ids.order_id as workflow_id,
            'growth-' || md5('idem' || nm.n) as idem,
            case when r.t_charge is null then null
                 else substring(r.t_charge from '^[a-z]+_') || substr(md5('charge' || nm.n || $6), 1, 24) end
              as charge_id,
            case when r.t_receipt is null then null
                 else substring(r.t_receipt from '^[^_]+_') || substr(md5('receipt' || nm.n || $6), 1, 24) end
              as receipt_id,
            'evt_' || substr(md5('event' || nm.n || $6), 1, 24) as event_id
       from numbered nm
       join kinds kd on kd.kind = nm.kind
       join ranked r on r.kind = kd.template_kind and r.k = nm.n % r.of
      cross join lateral (select 'ord_' || substr(md5('order' || nm.n || $6), 1, 24) as order_id) ids`,
    [plan.orders, plan.perMille.rejected, plan.perMille.needsAttention, plan.tenants, plan.days, String(t0)],
  );
  await db.query(
    `alter table growth_map
       add column charge_dk text, add column receipt_dk text`,
  );
  await db.query(
    `update growth_map set
       charge_dk = ${downstreamKeySql('tenant', "'payment.charge'", "workflow_id || '/charge'")},
       receipt_dk = ${downstreamKeySql('tenant', "'email.receipt'", "workflow_id || '/receipt'")}`,
  );
  await db.query('create index on growth_map (n)');
  await db.query('analyze growth_map');

  // The templates' rows, set aside once per table with their template's slot: each chunk joins
  // these few rows, never the growing table.
  const statements: string[] = [];
  for (const { table, templateRows } of TABLES) {
    const cols = await columnsOf(db, table);
    await db.query(
      `create temp table growth_tpl_${table} as
       select m.slot, x.* from growth_templates m join ${table} x on ${templateRows}`,
    );
    statements.push(`insert into ${table} (${cols.map((c) => c.name).join(', ')})
            select ${cols.map(copyExpression).join(',\n                   ')}
              from growth_map m join growth_tpl_${table} x on x.slot = m.slot
             where m.n >= $1 and m.n < $2`);
  }
  for (let lo = 0; lo < plan.orders; lo += plan.chunk) {
    const hi = Math.min(plan.orders, lo + plan.chunk);
    await db.query('BEGIN');
    for (const text of statements) await db.query(text, [lo, hi]);
    await db.query('COMMIT');
    const secs = (performance.now() - t0) / 1000;
    say(`  preload: ${hi}/${plan.orders} orders (${Math.round(secs)} s)`);
  }

  // What a lost charge answer leaves after the reconciliation horizon: the order parked, the charge's
  // record unknown (never presumed failed), the status step at needs_attention instead of rejected.
  await db.query(
    `update orders o set status = 'needs_attention', reason = 'payment_unknown_horizon', charge_id = null,
            last_error = 'the charge outcome stayed unknown past the reconciliation horizon'
       from growth_map m where m.kind = 'needs_attention' and o.tenant_id = m.tenant and o.id = m.order_id`,
  );
  await db.query(
    `update operations op set state = 'unknown', completed_at = null, result = null, provider_ref = null,
            error = json_build_object('code', 'provider_timeout',
                                      'message', 'the provider did not answer in time')
       from growth_map m
      where m.kind = 'needs_attention' and op.tenant_id = m.tenant and op.operation_type = 'payment.charge'
        and op.key = m.workflow_id || '/charge'`,
  );
  await db.query(
    `update operations op set key = m.workflow_id || '/status/needs_attention',
            result = replace(op.result::text, '"rejected"', '"needs_attention"')::json
       from growth_map m
      where m.kind = 'needs_attention' and op.tenant_id = m.tenant and op.operation_type = 'order.status'
        and op.key = m.workflow_id || '/status/rejected'`,
  );
  for (const { table } of TABLES) await db.query(`drop table growth_tpl_${table}`);
  await db.query('reset statement_timeout');
  await db.query('drop table growth_map');
  await db.query('drop table growth_templates');
  say('  preload: vacuum analyze (what autovacuum would have done over the week)');
  for (const { table } of TABLES) await db.query(`vacuum analyze ${table}`);
  const rows: Record<string, number> = {};
  for (const { table } of TABLES) {
    rows[table] = (await db.query<{ n: number }>(`select count(*)::int as n from ${table}`)).rows[0]?.n ?? 0;
  }
  return { seconds: (performance.now() - t0) / 1000, rows };
}
