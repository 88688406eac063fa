-- Why: a rejected or parked order must say why in a form a program can act
-- on (issue #11 item 5): `last_error` is prose for humans, `reason` is a
-- short code from a fixed vocabulary (see ORDER_REASONS in
-- src/orders/model.ts), e.g. `decline_code:card_declined`,
-- `provider_rejected`, `payment_unknown_horizon`, `receipt_failed`,
-- `status_write_failed`. The workflow writes it with the status, in the same
-- transaction; it is NULL for orders that are neither rejected nor parked.
ALTER TABLE orders ADD COLUMN reason text CHECK (reason IS NULL OR length(reason) BETWEEN 1 AND 200);
