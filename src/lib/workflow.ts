/**
 * `onceflow/workflow`: what workflow code may import from the library. Only
 * deterministic, I/O-free modules: it is bundled into Temporal's sandbox.
 */
export { stepKey } from './keys.ts';
