/**
 * Every ledger record of one order's steps, oldest first: the charge, the
 * receipt and the status writes of each re-drive epoch, read by their exact
 * keys (orderStepRefs), one primary-key probe each. A re-drive epoch's keys
 * are only known by number, so the epochs are read in batches until a batch
 * has no re-drive step at all. Epochs without a record are rare (every status
 * write of that re-drive failed, or retention reaped it); a run of more than a
 * whole batch of them would hide the later steps (operators still see them:
 * `npm run ops -- list --key-prefix`). GET /v1/orders/{id} and the operator's
 * order view both read them here.
 */
import type { Ledger, OperationRecord } from 'onceflow';
import { orderStepRefs } from './model.ts';

/** Re-drive epochs read per statement. */
const STEP_EPOCHS_PER_READ = 8;

export async function readOrderStepRecords(
  ledger: Pick<Ledger, 'getMany'>,
  tenantId: string,
  workflowId: string,
): Promise<OperationRecord[]> {
  const records: OperationRecord[] = [];
  for (let from = 0; ; from += STEP_EPOCHS_PER_READ) {
    const refs = orderStepRefs(workflowId, from, from + STEP_EPOCHS_PER_READ);
    const epochOf = new Map(refs.map((r) => [`${r.operationType}\n${r.key}`, r.epoch]));
    const found = await ledger.getMany(tenantId, refs);
    records.push(...found);
    if (!found.some((r) => (epochOf.get(`${r.operationType}\n${r.key}`) ?? 0) > 0)) break;
  }
  return records.sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime() || (a.key < b.key ? -1 : 1));
}
