/** The operator's recovery path: the service, its admin routes, its errors. See docs/OPERATIONS.md. */
export {
  Operator,
  defaultActor,
  type OperationListItem,
  type OperationStory,
  type AttentionItem,
} from './operator.ts';
export { OpsError, isOpsError } from './errors.ts';
export { Recovery, otherDatabaseLine } from './recover.ts';
export { opsRoutes } from './routes.ts';
export type { AuditEntry } from '../audit/sql.ts';
