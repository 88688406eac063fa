/**
 * examples/webhook-receiver from the packed @onceflow/client, run as its user runs it (a child
 * process, `node dist/main.js`), receiving real HTTP deliveries made by the worker's own sending
 * code (src/merchant-events/send.ts `sendEvent`: the body, the Standard Webhooks signature, the
 * POST). A retried event is processed once, across a SIGKILL and restart of the receiver too; an
 * older version of an object is dropped; a bad signature is refused and nothing is stored.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createPool, type Pool } from '../../src/db/index.ts';
import { newSigningSecret, sendEvent } from '../../src/merchant-events/send.ts';
import { emptyDatabase } from '../support/env.ts';
import { until } from '../support/wait.ts';
import { sh, spawnNode, type Child } from './example-project.ts';

const root = path.resolve(import.meta.dirname, '../..');

/**
 * Packs a staged copy of packages/client (its prepack rebuilds dist/, which test/client/package.test.ts
 * may be rebuilding at the same time in the package folder) and returns the tarball's path.
 */
async function packClient(work: string): Promise<string> {
  const stage = path.join(work, 'stage');
  const pkg = path.join(stage, 'packages/client');
  fs.cpSync(path.join(root, 'packages/client'), pkg, {
    recursive: true,
    filter: (src) => !/[/\\](node_modules|dist)$/.test(src) && !src.endsWith('.tgz'),
  });
  fs.copyFileSync(path.join(root, 'tsconfig.json'), path.join(stage, 'tsconfig.json'));
  fs.symlinkSync(path.join(root, 'node_modules'), path.join(stage, 'node_modules'), 'dir');
  const { stdout } = await sh('npm', ['pack', '--silent', '--pack-destination', work], pkg);
  const tarball = path.join(work, stdout.trim().split('\n').pop() ?? '');
  if (!tarball.endsWith('.tgz') || !fs.existsSync(tarball))
    throw new Error(`npm pack printed no tarball: ${stdout}`);
  return tarball;
}

/** A copy of the example with @onceflow/client from the tarball, installed and built (tsc). */
async function installReceiver(work: string, tarball: string): Promise<string> {
  const project = path.join(work, 'webhook-receiver');
  fs.cpSync(path.join(root, 'examples/webhook-receiver'), project, {
    recursive: true,
    filter: (src) => !/[/\\](node_modules|dist)$/.test(src),
  });
  const manifestPath = path.join(project, 'package.json');
  const manifest = JSON.parse(fs.readFileSync(manifestPath, 'utf8')) as {
    dependencies: Record<string, string>;
  };
  manifest.dependencies['@onceflow/client'] = `file:${tarball}`;
  fs.writeFileSync(manifestPath, JSON.stringify(manifest, null, 2));
  await sh('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], project, {
    timeoutMs: 300_000,
  });
  await sh('npx', ['tsc'], project);
  return project;
}

const order = (id: string, status: string) => ({
  id,
  object: 'order',
  status,
  amount: 1999,
  currency: 'eur',
  customer: { id: 'cus_1', email: 'ada@example.com' },
});

/** An event body as the worker renders it (src/merchant-events/payload.ts). */
function eventBody(id: string, type: string, object: unknown, version: number): string {
  return JSON.stringify({ id, type, createdAt: new Date().toISOString(), data: { object, version } });
}

const evt = (n: number) => `evt_${n.toString(16).padStart(32, '0')}`;

describe('examples/webhook-receiver, from the packed @onceflow/client', () => {
  let work: string;
  let project: string;
  let db: { url: string; drop: () => Promise<void> };
  let pool: Pool;
  const secret = newSigningSecret();
  const children: Child[] = [];

  beforeAll(async () => {
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'onceflow-receiver-'));
    project = await installReceiver(work, await packClient(work));
    db = await emptyDatabase('receiver');
    pool = createPool(db.url, { max: 2 });
  }, 600_000);

  afterEach(async () => {
    for (const child of children.splice(0)) {
      if (child.proc.exitCode === null && child.proc.signalCode === null) child.proc.kill('SIGKILL');
      await child.exited(10_000);
    }
  });

  afterAll(async () => {
    await pool?.end();
    await db?.drop();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  /** The example's process, listening on a free port of 127.0.0.1; resolves with its URL. */
  async function startReceiver(): Promise<{ child: Child; url: string }> {
    const child = spawnNode('dist/main.js', project, {
      DATABASE_URL: db.url,
      WEBHOOK_SECRET: secret,
      PORT: '0',
      HOST: '127.0.0.1',
    });
    children.push(child);
    const line = await child.line(/"msg":"receiver listening"/, 30_000);
    return { child, url: (JSON.parse(line) as { url: string }).url };
  }

  /** One delivery attempt, exactly as the delivery activity makes it (a new timestamp each time). */
  const deliver = (url: string, eventId: string, body: string, secrets = [secret]) =>
    sendEvent({ url, eventId, body, secrets, policy: { allowPrivate: true } });

  const inbox = async () =>
    (
      await pool.query<{ event_id: string; outcome: string | null }>(
        'select event_id, outcome from webhook_inbox order by event_id',
      )
    ).rows;
  const objects = async () =>
    (
      await pool.query<{ object_id: string; status: string; version: number; event_id: string }>(
        'select object_id, status, version, event_id from merchant_objects order by object_id',
      )
    ).rows;

  it('verifies, stores each event ID once, answers 2xx at once, and drops a stale version', async () => {
    const { url } = await startReceiver();
    const completed = eventBody(evt(1), 'order.completed', order('ord_1', 'completed'), 4);

    const first = await deliver(url, evt(1), completed);
    expect(first).toMatchObject({ ok: true, statusCode: 200 });
    expect(JSON.parse(first.excerpt!)).toEqual({ received: evt(1), duplicate: false });
    // A retry of the same event (a lost answer): acknowledged, not processed again.
    const retry = await deliver(url, evt(1), completed);
    expect(JSON.parse(retry.excerpt!)).toEqual({ received: evt(1), duplicate: true });

    // An older transition of the same order, delivered late: stored, and dropped as stale.
    const older = eventBody(evt(2), 'order.needs_attention', order('ord_1', 'needs_attention'), 3);
    expect(await deliver(url, evt(2), older)).toMatchObject({ ok: true, statusCode: 200 });

    // A refund event, signed during a rotation (the new secret first): the receiver's secret still matches.
    const refund = { id: 'ref_1', object: 'refund', orderId: 'ord_1', amount: 500, status: 'succeeded' };
    const refunded = eventBody(evt(3), 'refund.succeeded', refund, 3);
    expect(await deliver(url, evt(3), refunded, [newSigningSecret(), secret])).toMatchObject({
      statusCode: 200,
    });

    await until('the three events processed', inbox, {
      done: (rows) => rows.length === 3 && rows.every((r) => r.outcome !== null),
    });
    expect(await inbox()).toEqual([
      { event_id: evt(1), outcome: 'applied' },
      { event_id: evt(2), outcome: 'stale' },
      { event_id: evt(3), outcome: 'applied' },
    ]);
    expect(await objects()).toEqual([
      { object_id: 'ord_1', status: 'completed', version: 4, event_id: evt(1) },
      { object_id: 'ref_1', status: 'succeeded', version: 3, event_id: evt(3) },
    ]);
  });

  it('refuses a wrong signature or a changed body with 400 and stores nothing', async () => {
    const { url } = await startReceiver();
    const before = await inbox();
    const body = eventBody(evt(10), 'order.rejected', order('ord_2', 'rejected'), 3);
    const wrongSecret = await deliver(url, evt(10), body, [newSigningSecret()]);
    expect(wrongSecret).toMatchObject({ ok: false, statusCode: 400 });
    expect(wrongSecret.excerpt).toContain('No matching signature found');
    // Signed for another event ID than the body's: the signature covers webhook-id.
    expect(await deliver(url, evt(11), body)).toMatchObject({ ok: false, statusCode: 400 });
    expect(await inbox()).toEqual(before);
  });

  it('remembers what it received across a SIGKILL: a redelivery after the restart is a duplicate', async () => {
    const first = await startReceiver();
    const body = eventBody(evt(20), 'order.completed', order('ord_3', 'completed'), 5);
    expect(await deliver(first.url, evt(20), body)).toMatchObject({ statusCode: 200 });
    first.child.proc.kill('SIGKILL');
    await first.child.exited(10_000);

    const second = await startReceiver();
    const again = await deliver(second.url, evt(20), body);
    expect(JSON.parse(again.excerpt!)).toEqual({ received: evt(20), duplicate: true });
    await until('the event processed', async () => (await objects()).find((o) => o.object_id === 'ord_3'));
    expect((await inbox()).filter((r) => r.event_id === evt(20))).toEqual([
      { event_id: evt(20), outcome: 'applied' },
    ]);
  });
});
