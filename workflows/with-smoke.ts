// The production workflows plus the smoke probe: the bundle entry of a worker
// started with WORKER_SMOKE_WORKFLOW=on (`npm start`'s self-check, the tests,
// bench). Production workers don't register the probe.
export * from './index.ts';
export { smokeWorkflow } from './smoke.ts';
