/** The operation ledger's public surface. Vocabulary: see the Terminology block in types.ts. */
export * from './types.ts';
export { LocalStatement, LOCAL_STATEMENT, type LocalStatementBody } from './local-statement.ts';
export { LedgerError, FinalFailure, isLedgerError, isDefiniteFailure } from './errors.ts';
export {
  canonicalJson,
  fingerprint,
  assertMinorUnits,
  validateKey,
  validateScope,
  downstreamKey,
  toStoredJson,
} from './canonical.ts';
export {
  Ledger,
  DEFAULT_RETENTION_MS,
  DEFAULT_LEASE_MS,
  DEFAULT_LOCAL_WAIT_MS,
  MAX_LIST_LIMIT,
  MAX_TIMER_MS,
  DEFAULT_KEY_WINDOW_MS,
  keyWindowMarginMs,
  withinKeyWindow,
} from './ledger.ts';
