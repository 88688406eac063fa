-- Why: a refund's reason is words a person writes (issue 44): any printable
-- text of 1 to 200 characters, spaces and other scripts included, where 0020
-- allowed visible ASCII only. Control characters stay out (they break logs
-- and the console). The API normalizes to NFC before it stores.
--
-- Online-safe (migrations/README.md): dropping a CHECK is a catalog change;
-- the new one is added NOT VALID and validated by 0025. Every existing row
-- already passes it (visible ASCII is a subset).
SET LOCAL lock_timeout = '5s';

ALTER TABLE refunds DROP CONSTRAINT refunds_reason_check;
ALTER TABLE refunds ADD CONSTRAINT refunds_reason_check
  CHECK (char_length(reason) BETWEEN 1 AND 200 AND reason !~ '[\u0001-\u001f\u007f-\u009f]') NOT VALID;
