-- Why: 0005 used to insert two demo API keys (sk_test_acme_local,
-- sk_test_globex_local) whose plaintext is published in the README. Every
-- database that ran it, production included, accepted them. Demo data now
-- lives in a seed step (src/db/seed.ts: `npm run seed`, run by `npm start` on
-- loopback and by the tests), so this removes the published keys wherever an
-- older 0005 put them; a local `npm start` seeds them again. Keys are matched
-- by hash, so no other key is touched. The demo tenants stay (they are not
-- credentials, and orders may reference them).
DELETE FROM api_keys
WHERE key_hash IN (
  encode(sha256('sk_test_acme_local'::bytea), 'hex'),
  encode(sha256('sk_test_globex_local'::bytea), 'hex')
);
