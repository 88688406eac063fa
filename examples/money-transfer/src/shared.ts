/** What the workflow, its activities and its starter share: types only (the workflow imports it). */

/** Move `amount` (in cents) from one account to another. */
export interface Transfer {
  from: string;
  to: string;
  amount: number;
}

/** One leg of a transfer as the workflow saw it. */
export interface LegReport {
  step: 'withdraw' | 'deposit' | 'refund';
  entryId: string;
  state: 'succeeded' | 'failed';
  /** True when a lost answer was found at the bank by key rather than asked for again. */
  reconciled: boolean;
}

export interface TransferResult {
  /** completed: money moved. declined: nothing moved. refunded: the deposit was refused and the withdrawal given back. */
  status: 'completed' | 'declined' | 'refunded';
  /** The bank's reason when a leg was refused; null when completed. */
  reason: string | null;
  legs: LegReport[];
}
