/** The operator's recovery path: the service, its admin routes, its errors. See docs/OPERATIONS.md. */
export { Operator } from './operator.ts';
export { defaultActor, type OperationListItem, type OperationStory, type AttentionItem } from './views.ts';
export { OpsError, isOpsError } from './errors.ts';
export { Recovery, otherDatabaseLine } from '../restore/recover.ts';
export { opsRoutes } from './routes.ts';
export type { AuditEntry } from '../audit/sql.ts';
