/**
 * What every workflow in workflows/ needs around its steps, whatever the
 * steps are: reading an activity's failure (its ApplicationFailure type,
 * which the activities set from FAILURE in src/orders/contract.ts, and a
 * message for operators), and an activity's options with the summary that
 * names the step and its key in the Temporal UI. Deterministic and I/O-free:
 * nothing here schedules a command.
 */
import { ActivityFailure, ApplicationFailure } from '@temporalio/workflow';

/**
 * The failure a step ended with: an activity's arrives as an ActivityFailure
 * around it, a local activity's (the order's steps, workflows/order.ts) as
 * the failure itself.
 */
function stepCause(err: unknown): unknown {
  return err instanceof ActivityFailure ? err.cause : err;
}

/** A step's failure as operators read it: the cause's type and message when there is one. */
export function failureMessage(err: unknown): string {
  const cause = stepCause(err);
  if (cause instanceof ApplicationFailure || (err instanceof ActivityFailure && cause instanceof Error))
    return `${cause.name}: ${cause.message}`;
  return err instanceof Error ? err.message : String(err);
}

/** The ApplicationFailure type a step failed with (after its retries), if it set one. */
export function failureType(err: unknown): string | undefined {
  const cause = stepCause(err);
  return cause instanceof ApplicationFailure ? (cause.type ?? undefined) : undefined;
}

/**
 * A step's options with its summary: the history in the Temporal UI then
 * names each step and its operation key, so it still tells the story.
 */
export function summarized<O extends object>(options: O, summary: string): O & { summary: string } {
  return { ...options, summary };
}
