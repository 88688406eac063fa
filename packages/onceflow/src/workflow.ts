/**
 * `onceflow/workflow`: what workflow code may import. Deterministic and
 * I/O-free: it is bundled into Temporal's workflow sandbox.
 */
export { stepKey } from './keys.ts';
export { LEDGER_FAILURE } from './failures.ts';
