/** ONCEFLOW_WORKER_* (src/config.ts): Worker Versioning's defaults, and what is refused (docs/UPGRADING.md). */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { refusedConfig as refused } from '../support/config.ts';
import { defaultBuildId } from '../../src/worker/bundle.ts';

describe('worker versioning config', () => {
  it('is on by default, the deployment named after the task queue, promoting new builds itself', () => {
    expect(loadConfig({}).workerVersioning).toEqual({
      enabled: true,
      deploymentName: 'onceflow-orders',
      buildId: undefined,
      promote: 'auto',
    });
    expect(loadConfig({ TEMPORAL_TASK_QUEUE: 'orders-eu' }).workerVersioning.deploymentName).toBe(
      'orders-eu',
    );
  });

  it('takes an explicit deployment, build ID and promotion policy, or turns versioning off', () => {
    expect(
      loadConfig({
        ONCEFLOW_WORKER_DEPLOYMENT: 'payments',
        ONCEFLOW_WORKER_BUILD_ID: '0.4.0',
        ONCEFLOW_WORKER_PROMOTE: 'never',
        ONCEFLOW_WORKER_VERSIONING: 'off',
      }).workerVersioning,
    ).toEqual({ enabled: false, deploymentName: 'payments', buildId: '0.4.0', promote: 'never' });
  });

  it.each([
    [{ ONCEFLOW_WORKER_DEPLOYMENT: 'onceflow.prod' }, /must not contain '\.' or ':'/],
    [{ TEMPORAL_TASK_QUEUE: 'orders:eu' }, /ONCEFLOW_WORKER_DEPLOYMENT \(default: TEMPORAL_TASK_QUEUE\)/],
    [{ ONCEFLOW_WORKER_BUILD_ID: 'a b' }, /ONCEFLOW_WORKER_BUILD_ID/],
    [{ ONCEFLOW_WORKER_PROMOTE: 'always' }, /ONCEFLOW_WORKER_PROMOTE must be one of auto, never/],
    [{ ONCEFLOW_WORKER_VERSIONING: 'maybe' }, /ONCEFLOW_WORKER_VERSIONING must be on or off/],
  ])('refuses %o', (env, message) => {
    expect(refused(env)).toMatch(message);
  });

  it('the default build ID is the package version and the workflow code hash', () => {
    expect(defaultBuildId()).toMatch(/^\d+\.\d+\.\d+-[0-9a-f]{16}$/);
  });
});
