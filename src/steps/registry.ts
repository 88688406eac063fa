/**
 * Every external step's descriptor, by operation type and by the activity
 * that performs it: what the operator's actions and the restore recovery
 * look a step up in, instead of switching on its type.
 */
import type { AnyStep, StepProviders } from './descriptor.ts';
import { chargeStep } from './payment.ts';
import { receiptStep, refundReceiptStep } from './receipt.ts';
import { refundStep } from './refund.ts';

const ALL: readonly AnyStep[] = [chargeStep, receiptStep, refundStep, refundReceiptStep];
const BY_TYPE = new Map(ALL.map((s) => [s.operationType, s]));
const BY_ACTIVITY = new Map(ALL.map((s) => [s.activity, s]));

/** The operation types that call a provider. */
export const EXTERNAL_OPERATION_TYPES: readonly string[] = ALL.map((s) => s.operationType);

/** The step an operation type names, or undefined for a local one (status, create). */
export function stepOf(operationType: string): AnyStep | undefined {
  return BY_TYPE.get(operationType);
}

/** The step an activity performs, or undefined for any other activity. */
export function stepPerformedBy(activity: string): AnyStep | undefined {
  return BY_ACTIVITY.get(activity);
}

/** The step's provider among those at hand. */
export function providerOf(step: AnyStep, providers: StepProviders): StepProviders[AnyStep['provider']] {
  return providers[step.provider];
}
