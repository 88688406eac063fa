// Every workflow a production worker registers. Workflow files import only
// @temporalio/workflow and *types* from activities.
export { orderWorkflow } from './order.ts';
export { refundWorkflow } from './refund.ts';
export { deliveryWorkflow } from './delivery.ts';
export { retentionWorkflow } from './retention.ts';
