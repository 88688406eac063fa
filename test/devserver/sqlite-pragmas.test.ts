/**
 * The dev server we start (npm start, the test setup) keeps its SQLite state
 * in WAL mode: the rollback journal with synchronous=full made every
 * Temporal write wait for fsyncs (docs/BENCHMARKS.md).
 */
import fs from 'node:fs';
import path from 'node:path';
import { inject } from 'vitest';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import {
  ensureTemporalCli,
  startDevServerOnFreePorts,
  type DevServer,
} from '../../dev/devserver/temporal.ts';
import { uniq } from '../support/env.ts';

describe('dev server SQLite settings', () => {
  let server: DevServer | undefined;
  afterAll(async () => {
    await server?.stop();
  });

  it('runs its state file in WAL mode', async () => {
    const dir = path.join(inject('dataDir'), uniq('devserver'));
    const dbFile = path.join(dir, 'temporal.sqlite');
    const cli = await ensureTemporalCli({ toolsDir: loadConfig().toolsDir });
    server = await startDevServerOnFreePorts({ cli, ui: false, dbFile, logFile: path.join(dir, 'log') });
    // SQLite file header bytes 18-19 (write/read format version): 2 = WAL, 1 = rollback journal.
    const header = Buffer.alloc(20);
    const fd = fs.openSync(dbFile, 'r');
    try {
      fs.readSync(fd, header, 0, 20, 0);
    } finally {
      fs.closeSync(fd);
    }
    expect(header.subarray(0, 15).toString()).toBe('SQLite format 3');
    expect([header[18], header[19]]).toEqual([2, 2]);
    expect(fs.existsSync(`${dbFile}-wal`)).toBe(true);
  });
});
