import type { Queryable } from '../db/index.ts';

/** Inserts the smoke row once; the primary key makes a repeat a no-op. Returns whether it inserted. */
export async function insertSmokeWrite(db: Queryable, key: string, workflowId: string): Promise<boolean> {
  const { rowCount } = await db.query(
    `insert into smoke_writes (key, workflow_id) values ($1, $2) on conflict (key) do nothing returning key`,
    [key, workflowId],
  );
  return rowCount === 1;
}
