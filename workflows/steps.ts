/**
 * What every workflow in workflows/ needs around its steps, whatever the
 * steps are: reading an activity's failure (its ApplicationFailure type,
 * which the activities set from FAILURE in src/orders/contract.ts, and a
 * message for operators), and an activity's options with the summary that
 * names the step and its key in the Temporal UI; and the re-drive's handlers.
 * Deterministic and I/O-free: nothing here schedules a command.
 */
import { ActivityFailure, ApplicationFailure, log, setHandler } from '@temporalio/workflow';
import type { UpdateDefinition } from '@temporalio/common';
import { FAILURE, redriveSignal, type RedriveRequest } from '../src/orders/contract.ts';

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

/** Where a workflow stands when a re-drive arrives. */
export interface Parking {
  readonly status: string;
  /** Parked: waiting for an operator. */
  readonly awaitingOperator: boolean;
  /** A re-drive was accepted; the parked step has not resumed yet. */
  readonly requested: boolean;
}

/**
 * The re-drive's handlers, as the order and refund workflows share them: the `redrive` update,
 * whose validator refuses a request without actor and reason, or a workflow that is not parked,
 * before anything is written to the history (the caller gets the error); and the older signal,
 * which cannot refuse and is honoured only while parked. `accept` marks the re-drive requested
 * and returns the update's answer.
 */
export function handleRedrive<A>(
  workflow: 'order' | 'refund',
  update: UpdateDefinition<A, [RedriveRequest]>,
  parking: () => Parking,
  accept: () => A,
): void {
  const accepted = ({ actor, reason }: RedriveRequest): A => {
    log.info('re-drive requested', { workflow, actor, reason });
    return accept();
  };
  const refuse = (message: string) =>
    ApplicationFailure.create({ type: FAILURE.redriveRefused, message, nonRetryable: true });
  setHandler(update, accepted, {
    validator: (request) => {
      if (!request?.actor?.trim() || !request?.reason?.trim())
        throw refuse('re-drive refused: actor and reason are required');
      const { status, awaitingOperator, requested } = parking();
      if (!awaitingOperator || requested) {
        throw refuse(
          `re-drive refused: the ${workflow} workflow is not parked (status ${status}` +
            `${requested ? ', a re-drive is already under way' : ''}); ` +
            'only a workflow waiting for an operator can be re-driven',
        );
      }
    },
  });
  setHandler(redriveSignal, (request) => {
    if (parking().awaitingOperator) accepted(request);
  });
}
