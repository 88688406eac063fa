import type { Pool } from '../src/db/index.ts';
import { insertSmokeWrite } from '../src/smoke/sql.ts';

export interface SmokeActivities {
  recordSmokeWrite(key: string, workflowId: string): Promise<boolean>;
}

export function createSmokeActivities(deps: { pool: Pool }): SmokeActivities {
  return {
    recordSmokeWrite: (key, workflowId) => insertSmokeWrite(deps.pool, key, workflowId),
  };
}
