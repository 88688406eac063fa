/**
 * The transfer's legs, each an onceflow external step of the running
 * workflow: claimed in the ledger under `<workflowId>/<step name>`, sent to
 * the bank under the step's downstream key (the same on every attempt), and,
 * when an answer was lost, looked up by that key before anything is sent
 * again. The bank's answer, posted or refused, is stored and replayed; what a
 * refusal means is the workflow's call.
 */
import { externalStep, type Ledger } from 'onceflow';
import type { BankClient } from './bank-client.js';
import type { Transfer } from './shared.js';

export function createActivities({ bank, ledger }: { bank: BankClient; ledger: Ledger }) {
  return {
    withdraw: (t: Transfer) =>
      externalStep(ledger, 'withdraw', {
        input: t,
        perform: ({ downstreamKey }) => bank.withdraw(downstreamKey, t.from, t.amount),
        reconcile: ({ downstreamKey }) => bank.find(downstreamKey),
      }),

    deposit: (t: Transfer) =>
      externalStep(ledger, 'deposit', {
        input: t,
        perform: ({ downstreamKey }) => bank.deposit(downstreamKey, t.to, t.amount),
        reconcile: ({ downstreamKey }) => bank.find(downstreamKey),
      }),

    /** The compensation: gives the withdrawal back to the account it came from. */
    refund: (t: Transfer, withdrawalId: string) =>
      externalStep(ledger, 'refund', {
        input: { ...t, withdrawalId },
        perform: ({ downstreamKey }) => bank.refund(downstreamKey, t.from, t.amount, withdrawalId),
        reconcile: ({ downstreamKey }) => bank.find(downstreamKey),
      }),
  };
}

export type TransferActivities = ReturnType<typeof createActivities>;
