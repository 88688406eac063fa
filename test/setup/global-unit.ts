// The fast tier's global setup (`npm run test:unit`): Postgres only. No Temporal server, Go,
// SPIN or Chromium, so the inner loop needs nothing but the machine's Postgres.
import type { TestProject } from 'vitest/node';
import { setupRun } from './global.ts';

export default function setup(project: TestProject) {
  return setupRun(project, { temporal: false });
}
