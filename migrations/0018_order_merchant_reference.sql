-- Why: a natural key for orders (issue 27). `merchant_reference` is the
-- merchant's own reference for an order (optional): a semantic backstop
-- against a client that makes a new Idempotency-Key for the same intent. It
-- is unique per tenant through the partial unique index of the next file
-- (0019, built CONCURRENTLY, so it cannot share this file's transaction).
-- `refunded_amount` is the order's reserved refund total (issue 27): every
-- refund that is not `failed` adds its amount here in the same statement that
-- checks it against the charge (src/refunds/sql.ts), so the limit "never refund
-- more than was charged" is decided by a conditional update of this row, never
-- by a read followed by a write.
--
-- Online-safe (migrations/README.md): two columns, one without a default and
-- one with a constant default (catalog changes: no rewrite, no scan). The
-- CHECKs are added NOT VALID and never validated: every existing row holds NULL
-- and 0, which satisfy them; new and updated rows are checked either way.
SET LOCAL lock_timeout = '5s';

ALTER TABLE orders
  ADD COLUMN merchant_reference text,
  ADD COLUMN refunded_amount bigint NOT NULL DEFAULT 0,
  ADD CONSTRAINT orders_merchant_reference_check
    CHECK (merchant_reference ~ '^[\x21-\x7e]{1,100}$') NOT VALID,
  ADD CONSTRAINT orders_refunded_amount_check
    CHECK (refunded_amount >= 0 AND refunded_amount <= amount) NOT VALID;
