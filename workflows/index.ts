// Every workflow the worker registers. Workflow files import only
// @temporalio/workflow and *types* from activities.
export { smokeWorkflow } from './smoke.ts';
export { orderWorkflow } from './order.ts';
export { retentionWorkflow } from './retention.ts';
