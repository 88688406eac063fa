/**
 * One external step (charge, receipt, refund, refund receipt) described once:
 * its scope, what its record is fingerprinted by, how it performs, how its
 * provider is asked about an uncertain outcome, what a settled record stores
 * and what operators see. The activities, the operator's actions and the
 * restore recovery all read the descriptor (src/steps/index.ts has them by
 * operation type), through the generic functions below, so none of them
 * switches on the step.
 *
 * Vocabulary: to *reconcile* is to ask the provider (never to act); to
 * *settle* is to record an outcome for an unknown or in-progress step on
 * someone's word (a webhook event, an operator), through Ledger.settle.
 */
import {
  downstreamKey,
  isLedgerError,
  type ExternalOutcome,
  type ExternalRunOptions,
  type ExternalRunResult,
  type Json,
  type Ledger,
  type LedgerInput,
  type OperationRecord,
  type ReconcileOutcome,
  type Scope,
} from 'onceflow';
import { ProviderError } from '../providers/types.ts';
import type { Charge, EmailProvider, Message, PaymentProvider, Refund } from '../providers/types.ts';

export interface StepProviders {
  payments: PaymentProvider;
  email: EmailProvider;
}
export type ProviderName = keyof StepProviders;

/** A step's reference: its tenant and key; a refund also names the charge it refunds (search providers list by it). */
export interface StepRef {
  tenantId: string;
  key: string;
  chargeId?: string | undefined;
}

/**
 * The provider's answer by the downstream key. `record` is the ledger record
 * (its age decides the plan), `'no_claim'` when none exists, or absent when
 * the caller does not know it (src/steps/reconcile-plan.ts).
 */
export type Reconciler<R extends Json> = (ctx: {
  downstreamKey: string;
  record?: Pick<OperationRecord, 'createdAt'> | 'no_claim';
}) => Promise<ReconcileOutcome<R>>;

/** An outcome as the ledger stores it, with the provider's reference. */
interface StepOutcome<R extends Json = Json> {
  state: 'succeeded' | 'failed';
  result: R;
  providerRef: string | null;
}

export interface StepDescriptor<K extends ProviderName, R extends Json, I> {
  /** What operators call it. */
  name: 'charge' | 'receipt' | 'refund' | 'refund receipt';
  operationType: string;
  /** The workflow whose keys it runs under (`order/...` or `refund/...`). */
  workflow: 'order' | 'refund';
  /** The activity that performs it: the name its history events carry. */
  activity: string;
  provider: K;
  /** Its record's fingerprint: these fields of the performing activity's arguments, as string or number. */
  fingerprint: Readonly<Record<string, 'string' | 'number'>>;
  /** The key window the ledger applies to it: an override (tests), else what the provider declares. */
  keyWindowMs(provider: StepProviders[K], override: number | undefined): number | undefined;
  /** Performs it at the provider under the downstream key. */
  perform(provider: StepProviders[K], input: I, dk: string): Promise<ExternalOutcome<R>>;
  /**
   * Asks the provider the way it allows; never performs, except that a
   * replay provider given the original `input` inside its key window is
   * asked by replaying it (at most one effect: it dedupes by the key).
   */
  reconciler(
    provider: StepProviders[K],
    ref: StepRef,
    opts: { keyWindowMs?: number | undefined; input?: I | undefined },
  ): Reconciler<R>;
  /** The provider's ID a stored result names (the charge's, the refund's, the message's). */
  providerRefOf(result: R): string | null;
  /**
   * What a settled record stores: the shape the step itself stores, so a
   * later settlement of the same outcome is an idempotent no-op.
   */
  settled(outcome: 'succeeded' | 'failed', ref: string | null): R;
  /** The outcomes an operator may settle it with, and why not the others. */
  resolvable: { outcomes: readonly ('succeeded' | 'failed')[]; otherwise?: string };
  /** The provider's object under a downstream key, for the operator's view; null if it can't be asked. */
  find(provider: StepProviders[K], dk: string): Promise<Charge | Refund | Message | null>;
  /** The performing activity's result, as the ledger outcome the step stored (restore recovery). */
  fromActivityResult(result: Record<string, unknown>): StepOutcome<R>;
  /** The restore recovery reconciles it at once when it restores it `unknown` (money steps). */
  reconcileAfterRestore: boolean;
}

/** Any step, for registries keyed by operation type. */
export type AnyStep = StepDescriptor<ProviderName, Json, never>;

/** The step's state after a reconciliation or a settlement, and what the caller should do next. */
export interface ReconcileResult {
  settled: boolean;
  outcome: 'succeeded' | 'failed' | null;
  /** The provider's ID: the charge's for a charge, the provider refund's for a refund. */
  chargeId: string | null;
  /** No claim exists and the provider has nothing under the key: the step never started. */
  notStarted?: boolean;
  /**
   * The record is `unknown` and the provider never saw the key, inside its
   * key window: run the step again, which takes the record over, reconciles
   * once more and performs under the SAME downstream key.
   */
  performAgain?: boolean;
  /** Why the step is still unsettled, for operators (e.g. the key window has passed). */
  error?: string;
}

export interface StepDeps<K extends ProviderName> {
  ledger: Ledger;
  provider: StepProviders[K];
  /** The provider's idempotency-key window; default what the provider declares. */
  keyWindowMs?: number | undefined;
}

export function stepScope(step: AnyStep, ref: { tenantId: string; key: string }): Scope {
  return { tenantId: ref.tenantId, operationType: step.operationType, key: ref.key };
}

/** The ledger input of a step's record, from the performing activity's arguments. */
export function stepLedgerInput(step: AnyStep, args: object): LedgerInput {
  const a = args as Record<string, unknown>;
  const value: { [k: string]: Json } = {};
  for (const [field, kind] of Object.entries(step.fingerprint)) {
    value[field] = kind === 'number' ? Number(a[field]) : String(a[field]);
  }
  return { schemaVersion: 1, value };
}

export function providerMissing(what: string): never {
  throw new ProviderError('rejected', `the payment provider declares ${what} but does not implement it`, {
    code: 'provider_misconfigured',
  });
}

export interface RunStepOptions extends Pick<ExternalRunOptions, 'heartbeat' | 'renewEveryMs'> {
  /**
   * A write that must commit before the provider is called (a status the step carries), started
   * by the caller so that it runs beside the claim. The provider is called only once it resolves;
   * if it rejects, nothing is called and runStep throws NotPerformed (a definite failure).
   */
  before?: Promise<unknown> | undefined;
}

/** The step's `before` write failed, so the provider was not called. */
class NotPerformed extends Error {
  /** What the ledger releases a claim on (onceflow's isDefiniteFailure): nothing was sent. */
  readonly definite = true;
  constructor(cause: unknown) {
    super('the write before the provider call failed; the provider was not called', { cause });
    this.name = 'NotPerformed';
  }
}

/**
 * Performs the step once per operation key. Throws the ledger's errors
 * (outcome_unknown, in_progress, ownership_lost, conflict) and a definite
 * ProviderError or NotPerformed (the claim was released) unchanged; the caller maps them.
 */
export async function runStep<K extends ProviderName, R extends Json, I extends StepRef>(
  step: StepDescriptor<K, R, I>,
  deps: StepDeps<K>,
  input: I,
  { before, ...opts }: RunStepOptions = {},
): Promise<ExternalRunResult<R>> {
  const keyWindowMs = step.keyWindowMs(deps.provider, deps.keyWindowMs);
  return deps.ledger.runExternal<R>(
    stepScope(step, input),
    stepLedgerInput(step, input),
    {
      perform: async ({ downstreamKey: dk }) => {
        if (before) await before.catch((err: unknown) => Promise.reject(new NotPerformed(err)));
        return step.perform(deps.provider, input, dk);
      },
      reconcile: step.reconciler(deps.provider, input, { keyWindowMs, input }),
    },
    { ...opts, ...(keyWindowMs !== undefined ? { keyWindowMs } : {}) },
  );
}

/** A step's ledger record, as a ReconcileResult. */
export function stepState(step: AnyStep, record: OperationRecord): ReconcileResult {
  if (record.state !== 'succeeded' && record.state !== 'failed')
    return { settled: false, outcome: null, chargeId: null };
  const ref = record.result === null ? null : step.providerRefOf(record.result);
  return { settled: true, outcome: record.state, chargeId: ref || record.providerRef || null };
}

export function keyWindowPassed(step: AnyStep): string {
  const act = step.name === 'charge' ? 'charging' : step.name === 'refund' ? 'refunding' : 'sending';
  const twice = step.name === 'charge' ? 'charge' : step.name === 'refund' ? 'refund' : 'send';
  return (
    `the provider never saw the ${step.name}'s key, but the record is past the provider's key window: ` +
    `${act} again could ${twice} twice; an operator must resolve it`
  );
}

/**
 * Reconciles a step without ever performing it. No claim: never claimed,
 * released after a definite refusal, or reaped long after it settled; only
 * the provider can tell which, so it is asked by the same key. An
 * unresolved record is taken over and asked the way the provider allows;
 * "never saw the key" inside the window means perform again under it.
 * Throws the ledger's outcome_unknown when the provider could not be asked
 * (the record stays unknown); other ledger errors unchanged.
 */
export async function reconcileStep<K extends ProviderName, R extends Json, I>(
  step: StepDescriptor<K, R, I>,
  deps: StepDeps<K>,
  ref: StepRef,
): Promise<ReconcileResult> {
  const scope = stepScope(step, ref);
  const keyWindowMs = step.keyWindowMs(deps.provider, deps.keyWindowMs);
  const reconcile = step.reconciler(deps.provider, ref, { keyWindowMs });
  if (!(await deps.ledger.get(scope))) {
    const answer = await reconcile({ downstreamKey: downstreamKey(scope), record: 'no_claim' });
    if (answer.state === 'succeeded' || answer.state === 'failed') {
      return { settled: true, outcome: answer.state, chargeId: answer.providerRef ?? null };
    }
    if (answer.state === 'pending') return { settled: false, outcome: null, chargeId: null };
    return { settled: false, outcome: null, chargeId: null, notStarted: true };
  }
  const r = await deps.ledger.reconcileUnresolved<R>(scope, reconcile, { keyWindowMs });
  const state = stepState(step, r.record);
  if (r.answer !== 'not_found') return state;
  return r.performable ? { ...state, performAgain: true } : { ...state, error: keyWindowPassed(step) };
}

/**
 * Settles an uncertain step: records a provider event or an operator's
 * decision. A record already final with the other outcome wins (the
 * provider's own answer, or an earlier settlement, over a later event): its
 * state is returned, so a late event never moves a step backwards.
 */
export async function settleStep(
  step: AnyStep,
  ledger: Ledger,
  ref: { tenantId: string; key: string },
  outcome: 'succeeded' | 'failed',
  providerRef: string | null,
): Promise<ReconcileResult> {
  const scope = stepScope(step, ref);
  try {
    const { record } = await ledger.settle(scope, {
      state: outcome,
      result: step.settled(outcome, providerRef),
      ...(providerRef ? { providerRef } : {}),
    });
    return stepState(step, record);
  } catch (err) {
    if (isLedgerError(err, 'invalid_state')) {
      const record = await ledger.get(scope);
      if (record) return stepState(step, record);
    }
    throw err;
  }
}
