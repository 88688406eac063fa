/**
 * SQL for `restore_recoveries` (migration 0021) and `database_identity`
 * (0026), the only module that queries them: a declared recovery after a
 * database restore (while one is pending, creates answer 503 and workers
 * wait, src/restore/gate.ts), and the identity that tells a restored
 * database from a different one.
 */
import type { Queryable } from '../db/index.ts';

export interface RecoveryRow {
  id: string;
  since: Date | null;
  declared_by: string;
  declared_at: Date;
  completed_at: Date | null;
  summary: unknown;
}

/** The pending recovery, if one is declared and not finished. */
export async function selectPendingRecovery(db: Queryable): Promise<RecoveryRow | null> {
  const { rows } = await db.query<RecoveryRow>({
    name: 'recovery_pending',
    text: `select id, since, declared_by, declared_at, completed_at, summary
             from restore_recoveries where completed_at is null`,
  });
  return rows[0] ?? null;
}

/**
 * Declares a recovery, or returns the one already pending (a partial unique
 * index allows one): declaring twice, from two APIs that both detected the
 * restore or from the command after an API did, is one recovery. A later
 * declaration with a `since` fills it in where the first had none.
 */
export async function declareRecovery(
  db: Queryable,
  r: { since: Date | null; declaredBy: string },
): Promise<{ row: RecoveryRow; declared: boolean }> {
  const { rows } = await db.query<RecoveryRow & { declared: boolean }>(
    `insert into restore_recoveries as r (since, declared_by) values ($1, $2)
     on conflict ((true)) where completed_at is null
       do update set since = coalesce(r.since, excluded.since)
     returning id, since, declared_by, declared_at, completed_at, summary, (xmax = 0) as declared`,
    [r.since, r.declaredBy.slice(0, 200)],
  );
  const { declared, ...row } = rows[0]!;
  return { row, declared };
}

/** Ends the pending recovery with its summary; false when none was pending. */
export async function completeRecovery(db: Queryable, id: string, summary: unknown): Promise<boolean> {
  const { rowCount } = await db.query(
    `update restore_recoveries set completed_at = now(), summary = $2 where id = $1 and completed_at is null`,
    [id, JSON.stringify(summary)],
  );
  return rowCount === 1;
}

/**
 * This database's identity (0026): kept by a backup and its restores, another in a new database.
 * Null only if its row was deleted by hand.
 */
export async function selectDatabaseIdentity(db: Queryable): Promise<string | null> {
  const { rows } = await db.query<{ id: string }>({
    name: 'database_identity',
    text: 'select id from database_identity',
  });
  return rows[0]?.id ?? null;
}
