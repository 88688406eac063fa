/** The operator's recovery path: the service, its admin routes, its errors. See docs/OPERATIONS.md. */
export {
  Operator,
  workflowIdForKey,
  defaultActor,
  type OperatorDeps,
  type ActorOptions,
  type ListOperationsFilter,
  type OperationListItem,
  type OperationStory,
  type ProviderView,
  type ReconcileResult,
  type ResolveResult,
  type RedriveResult,
  type AttentionItem,
} from './operator.ts';
export { OpsError, isOpsError, type OpsErrorCode } from './errors.ts';
export { opsRoutes, type OpsRoutesOptions } from './routes.ts';
export type { AuditEntry, AuditAction, AuditSource } from '../audit/sql.ts';
export type { OrderSummary } from './operator.ts';
