/**
 * Every ledger record of one order's steps, read by exact key (one primary-key probe each). Re-drive
 * epochs are known only by number, so they are read in batches until one has no step; a whole batch
 * of empty epochs would hide later ones (rare; `ops list --key-prefix` still shows them).
 */
import type { Ledger, OperationRecord } from 'onceflow';
import type { Queryable } from 'onceflow/postgres';
import { orderStepRefs } from './model.ts';

/** Re-drive epochs read per statement. */
const STEP_EPOCHS_PER_READ = 8;

export async function readOrderStepRecords(
  ledger: Pick<Ledger, 'getMany'>,
  tenantId: string,
  workflowId: string,
  /** Where the first batch is read (a client that sends it with other statements); the pool otherwise. */
  db?: Queryable,
): Promise<OperationRecord[]> {
  const records: OperationRecord[] = [];
  for (let from = 0; ; from += STEP_EPOCHS_PER_READ) {
    const refs = orderStepRefs(workflowId, from, from + STEP_EPOCHS_PER_READ);
    const epochOf = new Map(refs.map((r) => [`${r.operationType}\n${r.key}`, r.epoch]));
    const found = await ledger.getMany(tenantId, refs, from === 0 ? db : undefined);
    records.push(...found);
    if (!found.some((r) => (epochOf.get(`${r.operationType}\n${r.key}`) ?? 0) > 0)) break;
  }
  return records.sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime() || (a.key < b.key ? -1 : 1));
}
