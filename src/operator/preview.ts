/**
 * What a re-drive of a parked order will do, step by step, computed from the
 * ledger and the providers' declared key windows before anything runs: the
 * operator console shows it before asking for confirmation, and the admin
 * API refuses a re-drive the preview refuses.
 *
 * A re-drive resumes the workflow, which runs its remaining steps again under
 * the same operation keys (a status write opens a new epoch). For each
 * provider step that means, by its ledger record:
 * - none: it runs for the first time under its downstream key;
 * - succeeded / failed: the stored outcome is replayed, nothing is sent;
 * - in_progress under a live lease: it waits for that attempt (then replays
 *   its outcome, or takes over after the lease);
 * - unknown (or an expired lease): it is reconciled first, by asking the
 *   provider under the same key, and sent again under that key only if the
 *   provider has no record, which is safe only inside the provider's key
 *   window. Past the window it is refused: reconcile it first (the provider
 *   may answer by search), or resolve it with the provider's answer.
 */
import type { OperationRecord } from 'onceflow';
import type { ProviderCapabilities } from '../providers/types.ts';

type StepEffect = 'run' | 'replay' | 'wait' | 'reconcile_first' | 'refused_past_window';

interface StepPreview {
  name: string;
  operationType: string;
  key: string;
  /** The ledger state, or 'none' when the step was never claimed. */
  state: OperationRecord['state'] | 'none';
  effect: StepEffect;
  /** One sentence an operator reads before confirming. */
  explanation: string;
  /** How much of the provider's key window is left for this record; null when it has no keys or no record. */
  keyWindowLeftMs: number | null;
}

export interface RedrivePreview {
  /** False when a step would run past its provider's key window. */
  allowed: boolean;
  /** Why not, pointing to the action to take first. */
  refusal: string | null;
  steps: StepPreview[];
}

export interface ProviderStep {
  name: string;
  operationType: string;
  key: string;
  record: OperationRecord | undefined;
  capabilities: ProviderCapabilities;
}

/** How much of the key window is left for a record created at `createdAt`; null without a window. */
export function keyWindowLeftMs(
  capabilities: ProviderCapabilities,
  record: Pick<OperationRecord, 'createdAt'> | undefined,
  now: Date,
): number | null {
  if (capabilities.keyWindowMs === null || !record) return null;
  return Math.max(0, capabilities.keyWindowMs - (now.getTime() - record.createdAt.getTime()));
}

const hours = (ms: number) => `${(ms / 3_600_000).toFixed(1)} h`;

function previewStep(step: ProviderStep, now: Date): StepPreview {
  const { record, capabilities } = step;
  const left = keyWindowLeftMs(capabilities, record, now);
  const base = { name: step.name, operationType: step.operationType, key: step.key, keyWindowLeftMs: left };
  if (!record) {
    return {
      ...base,
      state: 'none',
      effect: 'run',
      explanation: `runs for the first time, under downstream key ${step.key}`,
    };
  }
  const downstream = record.downstreamKey ?? step.key;
  if (record.state === 'succeeded' || record.state === 'failed') {
    return {
      ...base,
      state: record.state,
      effect: 'replay',
      explanation: `replays its stored outcome (${record.state}); nothing is sent to the provider`,
    };
  }
  const leaseLive =
    record.state === 'in_progress' && record.leaseExpiresAt !== null && record.leaseExpiresAt > now;
  if (leaseLive) {
    return {
      ...base,
      state: record.state,
      effect: 'wait',
      explanation:
        `a live attempt holds it until ${record.leaseExpiresAt!.toISOString()}; the re-drive waits for it, ` +
        'then replays its outcome or takes it over and reconciles first',
    };
  }
  if (capabilities.keyWindowMs === null) {
    // No keys at all (SMTP): the adapter's declared policy decides, under the same Message-ID.
    return {
      ...base,
      state: record.state,
      effect: 'reconcile_first',
      explanation:
        `the provider cannot be asked; the receipt policy decides: resent under the same identity ` +
        `(${downstream}) when at least once, parked again when at most once`,
    };
  }
  if (left !== null && left > 0) {
    return {
      ...base,
      state: record.state,
      effect: 'reconcile_first',
      explanation:
        `asks the provider under ${downstream} first; sent again under that same key only if the provider ` +
        `has no record (it dedupes for ${hours(left)} more)`,
    };
  }
  return {
    ...base,
    state: record.state,
    effect: 'refused_past_window',
    explanation:
      `its outcome is ${record.state} and the provider's key window has passed: sending again could act twice. ` +
      'Reconcile it first, or resolve it with the provider’s answer',
  };
}

export function previewRedrive(steps: ProviderStep[], now: Date): RedrivePreview {
  const previews = steps.map((s) => previewStep(s, now));
  const refused = previews.filter((p) => p.effect === 'refused_past_window');
  return {
    allowed: refused.length === 0,
    refusal:
      refused.length === 0
        ? null
        : `re-drive refused: ${refused.map((p) => `${p.name} (${p.key})`).join(', ')} would run past the ` +
          "provider's key window; reconcile it first (ops reconcile, or Reconcile in the console), " +
          "or resolve it with the provider's answer",
    steps: previews,
  };
}
