/**
 * examples/money-transfer from the packed onceflow, against the example's own
 * bank (started here, in this process, so the test decides when it answers)
 * and its worker as a child process on the run's Temporal dev server. The
 * bank loses the withdrawal's answer, and the worker is SIGKILLed while the
 * deposit is at the bank; a new worker finishes the transfer. The bank must
 * end with one withdrawal and one deposit, each asked for once. A refused
 * deposit gives the withdrawal back exactly once.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Ledger } from 'onceflow';
import { createPool } from '../../src/db/index.ts';
import { emptyDatabase, temporalAddress, temporalClient, uniq } from '../support/env.ts';
import {
  installExample,
  packOnceflow,
  sh,
  unbuiltSources,
  spawnNode,
  within,
  type Child,
} from './example-project.ts';
import type { Account, Bank, startBank as StartBank } from '../../examples/money-transfer/src/bank.ts';
import type { Transfer, TransferResult } from '../../examples/money-transfer/src/shared.ts';

describe('examples/money-transfer, from the packed onceflow', () => {
  let work: string;
  let project: string;
  let startBank: typeof StartBank;
  let db: { url: string; drop: () => Promise<void> };
  const children: Child[] = [];
  const banks: Bank[] = [];

  beforeAll(async () => {
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'onceflow-transfer-'));
    project = await installExample('money-transfer', work, await packOnceflow(work));
    // The example's own bank, as built from the copy: the test holds and drops its answers.
    ({ startBank } = (await import(pathToFileURL(path.join(project, 'dist/bank.js')).href)) as {
      startBank: typeof StartBank;
    });
    db = await emptyDatabase('transfer');
  }, 600_000);

  afterEach(async () => {
    for (const child of children.splice(0)) {
      if (child.proc.exitCode === null && child.proc.signalCode === null) child.proc.kill('SIGKILL');
      await child.exited(10_000);
    }
    for (const bank of banks.splice(0)) await bank.close();
  });

  afterAll(async () => {
    await db?.drop();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  async function openBank(accounts: Record<string, Account>): Promise<Bank> {
    const bank = await startBank({ accounts });
    banks.push(bank);
    return bank;
  }

  /** One worker process of the example, polling `taskQueue`; resolves once it runs. */
  async function startWorker(
    bank: Bank,
    taskQueue: string,
  ): Promise<{ child: Child; migrationsApplied: string[] }> {
    const child = spawnNode('dist/worker.js', project, {
      DATABASE_URL: db.url,
      TEMPORAL_ADDRESS: temporalAddress(),
      BANK_URL: bank.url,
      TASK_QUEUE: taskQueue,
    });
    children.push(child);
    const line = await child.line(/"msg":"worker running"/, 60_000);
    return {
      child,
      migrationsApplied: (JSON.parse(line) as { migrationsApplied: string[] }).migrationsApplied,
    };
  }

  async function records(workflowId: string) {
    const pool = createPool(db.url, { max: 1 });
    try {
      const list = await new Ledger(pool).list({ keyPrefix: `${workflowId}/` });
      return list
        .map((r) => ({ key: r.key.slice(workflowId.length + 1), state: r.state, attempts: r.attempts }))
        .sort((a, b) => a.key.localeCompare(b.key));
    } finally {
      await pool.end();
    }
  }

  it('type-checks and builds against the published declarations (in beforeAll: tsc fails on a type error)', () => {
    expect(unbuiltSources(project)).toEqual([]);
  });

  it('moves the money once though the withdrawal answer is lost and the worker is killed mid-deposit', async () => {
    const bank = await openBank({ alice: { balance: 10_000 }, bob: { balance: 0 } });
    bank.loseResponse('withdrawal');
    const deposit = bank.hold('deposit');
    const taskQueue = uniq('transfer');
    const first = await startWorker(bank, taskQueue);
    expect(first.migrationsApplied).toEqual(['0001_ledger']);

    const temporal = await temporalClient();
    try {
      const workflowId = `transfer/${uniq('lost-and-killed')}`;
      const transfer: Transfer = { from: 'alice', to: 'bob', amount: 2_500 };
      const handle = await temporal.client.workflow.start('transferWorkflow', {
        taskQueue,
        workflowId,
        args: [transfer],
      });

      // The deposit is at the bank, not yet booked: the worker that sent it dies now.
      await within(deposit.arrived, 60_000, 'the deposit request at the bank');
      first.child.proc.kill('SIGKILL');
      expect(await first.child.exited(10_000)).toBe('SIGKILL');
      // The bank books it anyway; its answer goes nowhere.
      deposit.release();
      await within(deposit.done, 10_000, 'the held deposit to be booked');

      const second = await startWorker(bank, taskQueue);
      expect(second.migrationsApplied).toEqual([]);
      const result = (await within(handle.result(), 90_000, 'the transfer to finish')) as TransferResult;

      expect(result).toEqual({
        status: 'completed',
        reason: null,
        legs: [
          // Both lost answers were found at the bank by key.
          { step: 'withdraw', entryId: 'en_1', state: 'succeeded', reconciled: true },
          { step: 'deposit', entryId: 'en_2', state: 'succeeded', reconciled: true },
        ],
      });
      expect(
        bank.entries().map(({ kind, account, amount, status }) => ({ kind, account, amount, status })),
      ).toEqual([
        { kind: 'withdrawal', account: 'alice', amount: 2_500, status: 'posted' },
        { kind: 'deposit', account: 'bob', amount: 2_500, status: 'posted' },
      ]);
      // Asked for once each: the retries looked the entries up instead of sending them again.
      expect([bank.requests('withdrawal'), bank.requests('deposit'), bank.requests('refund')]).toEqual([
        1, 1, 0,
      ]);
      expect([bank.balance('alice'), bank.balance('bob')]).toEqual([7_500, 2_500]);
      expect(await records(workflowId)).toEqual([
        { key: 'deposit', state: 'succeeded', attempts: 2 },
        { key: 'withdraw', state: 'succeeded', attempts: 2 },
      ]);

      // SIGTERM drains the worker and it exits cleanly.
      second.child.proc.kill('SIGTERM');
      expect(await second.child.exited(30_000)).toBe(0);
    } finally {
      await temporal.close();
    }
  }, 180_000);

  it('gives a refused deposit back exactly once, though the refund answer is lost', async () => {
    const bank = await openBank({ alice: { balance: 10_000 }, carol: { balance: 0, closed: true } });
    bank.loseResponse('refund');
    const taskQueue = uniq('transfer');
    await startWorker(bank, taskQueue);

    // Started the way a user starts one: the example's own starter, which waits for the result.
    const reference = uniq('refused');
    const { stdout } = await sh('node', ['dist/start.js', 'alice', 'carol', '4000', reference], project, {
      env: { TEMPORAL_ADDRESS: temporalAddress(), TASK_QUEUE: taskQueue },
      timeoutMs: 90_000,
    });
    const { workflowId, result } = JSON.parse(stdout.trim().split('\n').pop()!) as {
      workflowId: string;
      result: TransferResult;
    };
    expect(workflowId).toBe(`transfer/${reference}`);
    expect(result).toEqual({
      status: 'refunded',
      reason: 'account_closed',
      legs: [
        { step: 'withdraw', entryId: 'en_1', state: 'succeeded', reconciled: false },
        { step: 'deposit', entryId: 'en_2', state: 'failed', reconciled: false },
        { step: 'refund', entryId: 'en_3', state: 'succeeded', reconciled: true },
      ],
    });
    expect(
      bank.entries().map(({ kind, account, amount, status, refundOf }) => ({
        kind,
        account,
        amount,
        status,
        refundOf,
      })),
    ).toEqual([
      { kind: 'withdrawal', account: 'alice', amount: 4_000, status: 'posted', refundOf: null },
      { kind: 'deposit', account: 'carol', amount: 4_000, status: 'refused', refundOf: null },
      { kind: 'refund', account: 'alice', amount: 4_000, status: 'posted', refundOf: 'en_1' },
    ]);
    expect([bank.requests('withdrawal'), bank.requests('deposit'), bank.requests('refund')]).toEqual([
      1, 1, 1,
    ]);
    expect([bank.balance('alice'), bank.balance('carol')]).toEqual([10_000, 0]);
    // The refusal is a stored final outcome, replayed if the deposit step ever ran again.
    expect(await records(workflowId)).toEqual([
      { key: 'deposit', state: 'failed', attempts: 1 },
      { key: 'refund', state: 'succeeded', attempts: 2 },
      { key: 'withdraw', state: 'succeeded', attempts: 1 },
    ]);
  }, 180_000);
});
