import type { Pool } from '../src/db/index.ts';
import { createSmokeActivities } from './smoke.ts';

export interface ActivityDeps {
  pool: Pool;
}

/** The one place activities are wired to their dependencies. */
export function createActivities(deps: ActivityDeps) {
  return {
    ...createSmokeActivities(deps),
  };
}

export type Activities = ReturnType<typeof createActivities>;
