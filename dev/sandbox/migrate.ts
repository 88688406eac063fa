/**
 * The sandbox's own migration chain: dev/sandbox/migrations/, recorded in
 * `sandbox.migrations`, never in the product's `pgmigrations`. The product
 * (src/) holds no sandbox DDL; the sandbox applies this chain when it starts
 * (main.ts), and the test setup applies it to the run's template database.
 *
 * Same tool and rules as the product's chain (node-pg-migrate: one
 * transaction per file, an advisory lock so two sandboxes starting on one
 * database can't race, forward-only numbered files).
 */
import path from 'node:path';
import { runner } from 'node-pg-migrate';

const SANDBOX_MIGRATIONS_DIR = path.join(import.meta.dirname, 'migrations');
/** The advisory lock key of this chain: "SAND" in ASCII (the product's runner uses node-pg-migrate's default). */
const SANDBOX_MIGRATION_LOCK = 0x53414e44;

/** Applies the sandbox migrations `databaseUrl`'s database lacks; returns their names (none on a re-run). */
export async function applySandboxMigrations(
  databaseUrl: string,
  log: (msg: string) => void = () => undefined,
): Promise<string[]> {
  const applied = await runner({
    databaseUrl,
    dir: SANDBOX_MIGRATIONS_DIR,
    direction: 'up',
    migrationsSchema: 'sandbox',
    createMigrationsSchema: true,
    migrationsTable: 'migrations',
    checkOrder: true,
    // Several sandboxes may start on one database at once (tests, a restart loop): the later
    // ones wait for the first and then find nothing to do, instead of failing. The lock is the
    // sandbox chain's own, so it never holds up (or fails) the product's `npm run migrate`.
    advisoryLockMode: 'wait',
    lockValue: SANDBOX_MIGRATION_LOCK,
    log: () => undefined,
    logger: { debug: () => undefined, info: () => undefined, warn: log, error: log },
  });
  return applied.map((m) => m.name);
}
