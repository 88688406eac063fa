/** The operator's recovery path: the service, its admin routes, its errors. See docs/OPERATIONS.md. */
export { Operator } from './operator.ts';
export type { OperationListItem, OperationStory, AttentionItem } from './views.ts';
export { isOpsError } from './errors.ts';
export { opsRoutes } from './routes.ts';
export type { AuditEntry } from '../audit/sql.ts';
