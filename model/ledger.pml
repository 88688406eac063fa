/*
 * onceflow claim protocol (docs/MODEL.md; /work/wt/_notes/PROTOCOL.md), one
 * charge operation end to end: the ledger record (src/ledger), two activity
 * workers that may crash or be left running as zombies, Temporal's retries,
 * the order workflow's charge loop (workflows/order.ts), the operator
 * (src/operator/operator.ts) and a Stripe-like provider (dev/sandbox) with
 * per-key dedupe, in-flight requests, lost responses and a key window.
 *
 * Every labelled transition (T_*) is mapped to its function / SQL statement
 * in docs/MODEL.md. Mutants (each must yield a counterexample):
 *   -DMUT_NO_FENCE       completion without the owner-token check
 *   -DMUT_NO_RECONCILE   takeover performs without reconciling first
 *   -DMUT_PENDING_AS_NF  a lookup answering pending is treated as not_found
 *   -DMUT_NEW_KEY        a re-drive charges under a new key (sanity: P4 can fail)
 *   -DRECON_UNGATED      reconcileCharge answers performAgain on not_found even
 *                        outside the key window (liveness: finding F3)
 *   -DAS_SPECIFIED       PROTOCOL.md exactly, without fix F1 (double charge)
 *   -DNO_P5              turns P5 off, to show a mutant's effect on P1
 *   -DCAP_STRIPE         the provider declares Stripe's capabilities instead of
 *                        lookup by key: inside the key window an uncertain
 *                        outcome is settled by replaying the request under the
 *                        same key; after it (or without the request) by a
 *                        search whose index lags behind writes (P6)
 *   -DMUT_LAG_AS_PROOF   with CAP_STRIPE: a search's "not found" is taken as
 *                        proof before the declared lag has passed
 * Other knobs: MAX_FAULTS, CHARGE_MAX, RECON_MAX, MAX_REDRIVES; -DLIVENESS
 * adds the LTL property (pan -a -f).
 */

#ifndef MAX_FAULTS
#define MAX_FAULTS 2      /* crashes + zombie timeouts + lost responses + not-sent + provider 5xx */
#endif
#ifndef CHARGE_MAX
#define CHARGE_MAX 2      /* Temporal attempts of chargePayment per activity call (chargeMaxAttempts) */
#endif
#ifndef RECON_MAX
#define RECON_MAX 2       /* reconciliations before the horizon passes */
#endif
#ifndef MAX_REDRIVES
#define MAX_REDRIVES 1
#endif
#define NW 2              /* workers */

/* ledger record state (operations.state; ABSENT = no row) */
#define R_ABSENT  0
#define R_INPROG  1
#define R_UNKNOWN 2
#define R_SUCC    3
#define R_FAIL    4
#define final(s) (s == R_SUCC || s == R_FAIL)

/* lease_expires_at vs the database clock */
#define L_NULL    0
#define L_LIVE    1
#define L_EXPIRED 2

/* the provider's key window, measured from the record's created_at */
#define W_IN     0        /* created_at + W - margin > now(): perform again allowed */
#define W_MARGIN 1        /* guard refuses; the provider still remembers the key */
#define W_OUT    2        /* the provider may have forgotten the key */

/* provider per-key state */
#define P_NONE 0
#define P_PROC 1
#define P_DONE 2

/* responses to a worker */
#define RS_NONE  0
#define RS_SUCC  1
#define RS_FAIL  2
#define RS_IDEM  3        /* idempotency_error: same key still processing */
#define RS_5XX   4

/* lookup answers */
#define LK_NF    0
#define LK_PEND  1
#define LK_SUCC  2
#define LK_FAIL  3

/* activity tasks and results */
#define T_NONE   0
#define T_CHARGE 1
#define T_RECON  2
#define A_NONE    0
#define A_SUCC    1       /* chargePayment / reconcileCharge settled succeeded */
#define A_FAIL    2       /* ... settled failed (a decline) */
#define A_RETRY   3       /* retryable failure: outcome_unknown, in_progress, ownership_lost, released */
#define A_UNK     4       /* reconcileCharge: still unknown (pending, not settled, error) */
#define A_AGAIN   5       /* reconcileCharge: performAgain (provider never saw the key, inside the window) */

/* workflow status (orders.status) */
#define WS_PENDING 0      /* payment_pending */
#define WS_UNKNOWN 1      /* payment_unknown */
#define WS_ATTN    2      /* needs_attention, parked */
#define WS_PAID    3
#define WS_REJECTED 4

#define NKEYS 2           /* K0 = the charge's downstream key; K1 = any other key */
#define K0 0

/* ---- ledger record ---- */
byte rs = R_ABSENT;
byte owner = 0;           /* owner_token; 0 = null; a worker w holds token w+1 (see MODEL.md) */
byte lease = L_NULL;
byte rkey = 0;            /* downstream_key */
bool taken = false;       /* attempts > 0: the claim was taken over at least once */
byte win = W_IN;
byte ntok = 0;            /* ghost: the newest token issued (claims and takeovers) */
bool created = false;     /* ghost: a record was ever created (the window clock runs) */
byte final_val = R_ABSENT;/* ghost: first final state written */

/* ---- provider ---- */
byte ps[NKEYS];
byte pres[NKEYS];         /* stored outcome per key (RS_SUCC / RS_FAIL) */
byte proc_by[NKEYS];      /* worker whose request is processing */
byte effects[NKEYS];      /* ghost: charges made per key */
byte resp[NW];            /* the response a waiting worker will read */
bool waiting[NW];         /* the worker waits for a response (a late one to a worker that gave up is dropped) */

/* ---- Temporal / workflow ---- */
byte task = T_NONE;
byte task_key = 0;
bool task_taken = false;
byte cur_w = 0;           /* worker (w+1) running the attempt Temporal waits for; 0 = none */
byte res = A_NONE;        /* result of the current attempt */
bool att_dead = false;    /* the current attempt's worker crashed (heartbeat timeout fires) */
byte wf = WS_PENDING;
bool parked = false;
bool redrive_req = false;
byte redrives = 0;
byte pay_event = A_NONE;  /* operator's settling word, not yet applied */
bool charge_settled = false;

/* ---- faults ---- */
byte faults = 0;
bool kill[NW];
bool running[NW];
bool inflight[NW];        /* ghost: passed the window guard / extend, request not yet sent */

bool resolved = false;

#ifdef CAP_STRIPE
/* ---- Stripe-like provider: no lookup by key; replay inside the window, search after it ---- */
byte obj_res[NKEYS];      /* ghost: the charge object's outcome; unlike pres it survives the key being forgotten */
bool indexed[NKEYS];      /* the search index shows the key's charge (it lags behind the effect) */
bool lag_ok = true;       /* the code's clock: the declared lag has passed since the last request reached the provider */
bool proved_none = false; /* ghost: a search's "not found" was taken as proof that nothing was charged */
#endif

#define fault_ok (faults < MAX_FAULTS)
/* end of a worker step: an attempt with a result reports it to Temporal */
#define BAIL ans = 0; ok = false; if :: r != 0 -> goto report :: else -> skip fi

/* ---------------------------------------------------------------- ledger */

/* The stale-owner property (P2): a fenced write succeeds only for the newest token ever issued. */
#define FENCE_OK(tok) assert(tok == ntok)

#ifdef MUT_NO_FENCE
#define OWNS(tok) (rs == R_INPROG || rs == R_UNKNOWN)
#else
#define OWNS(tok) (owner == tok && (rs == R_INPROG || rs == R_UNKNOWN))
#endif

/* provider lookup by key (GET /v1/charges?idempotency_key=) */
inline lookup(k, ans) {
  if
  :: ps[k] == P_NONE -> ans = LK_NF
#ifdef MUT_PENDING_AS_NF
  :: ps[k] == P_PROC -> ans = LK_NF
#else
  :: ps[k] == P_PROC -> ans = LK_PEND
#endif
  :: ps[k] == P_DONE && pres[k] == RS_SUCC -> ans = LK_SUCC
  :: ps[k] == P_DONE && pres[k] == RS_FAIL -> ans = LK_FAIL
  fi
}

#ifdef CAP_STRIPE
/* Replay under the same key (the same POST /v1/payment_intents, Idempotency-Key K): the
   stored outcome, 409 while processing, or, if the provider never saw K, it performs now.
   Its answer is then modelled as lost (the next reconcile reads it): conservative. */
inline replay(k, ans, w) {
  lag_ok = false;
  if
  :: ps[k] == P_NONE -> ps[k] = P_PROC; proc_by[k] = w; ans = LK_PEND
  :: ps[k] == P_PROC -> ans = LK_PEND
  :: ps[k] == P_DONE && pres[k] == RS_SUCC -> ans = LK_SUCC
  :: ps[k] == P_DONE && pres[k] == RS_FAIL -> ans = LK_FAIL
  fi
}

/* Search by the reference stored with the charge (metadata): sees a charge only once indexed.
   "Not found" is proof (LK_NF) only past the whole window (created_at + W, by A1 no request
   is on its way then) plus the declared lag; before that it is pending (settle.ts:
   notFoundIsProof = now >= created_at + W + lag). */
inline search(k, ans) {
  if
  :: effects[k] > 0 && indexed[k] && obj_res[k] == RS_SUCC -> ans = LK_SUCC
  :: effects[k] > 0 && indexed[k] && obj_res[k] == RS_FAIL -> ans = LK_FAIL
  :: else ->
#ifdef MUT_LAG_AS_PROOF
       ans = LK_NF
#else
       if :: win == W_OUT && lag_ok -> ans = LK_NF :: else -> ans = LK_PEND fi
#endif
  fi
}

/* P6: a "nothing was charged" proof is never contradicted by a charge (checked here and at every effect) */
#define PROVE_NONE(k) proved_none = true; assert(!proved_none || effects[k] == 0)
#endif

/* P5: performing again (after a takeover or a reconcile) rests on the provider never having seen the key */
#ifdef NO_P5
#define PERFORM_AGAIN_OK(k) skip      /* to show what a mutant does to P1 without P5 in the way */
#else
#define PERFORM_AGAIN_OK(k) assert(ps[k] == P_NONE)
#endif

/* fenced completion: sql.completeOwned */
inline complete(tok, outcome, ok) {
  if
  :: OWNS(tok) -> FENCE_OK(tok); rs = outcome; owner = 0; lease = L_NULL; ok = true;
                  if :: final_val == R_ABSENT -> final_val = outcome :: else -> skip fi
  :: else -> ok = false
  fi
}

/* fenced: sql.markOwnedUnknown */
inline mark_unknown(tok) {
  if
  :: owner == tok && (rs == R_INPROG || rs == R_UNKNOWN) -> FENCE_OK(tok); rs = R_UNKNOWN; owner = 0; lease = L_NULL
  :: else -> skip
  fi
}

/* ---------------------------------------------------------------- worker */

proctype worker(byte w) {
  byte k, kind, tok, ans, r;
  bool ok, takeover;
end_idle:
  do
  :: atomic { task != T_NONE && !task_taken ->
       task_taken = true; cur_w = w + 1; k = task_key; kind = task;
       running[w] = true; kill[w] = false; tok = 0; ok = false; takeover = false; ans = 0; r = 0 }
     {
       if
       :: kind == T_CHARGE ->
         /* Ledger.runExternal: probe, then claim */
T_CLAIM: atomic {
           if
           :: final(rs) -> r = (rs == R_SUCC -> A_SUCC : A_FAIL)            /* replay */
           :: rs == R_ABSENT ->                                              /* fresh claim */
                tok = w + 1; ntok = tok; created = true; rs = R_INPROG; owner = tok; lease = L_LIVE; rkey = k; taken = false; inflight[w] = true
           :: (rs == R_INPROG && lease != L_LIVE) || rs == R_UNKNOWN ->       /* takeover */
                tok = w + 1; ntok = tok; rs = R_INPROG; owner = tok; lease = L_LIVE; takeover = true; taken = true; inflight[w] = true
           :: rs == R_INPROG && lease == L_LIVE -> r = A_RETRY               /* in_progress */
           fi;
           BAIL
         };
         if
         :: takeover ->
#ifndef MUT_NO_RECONCILE
T_RECONCILE_OWNED:
           atomic {
#ifdef CAP_STRIPE
             /* runExternal holds the request: replay inside the window, search after it */
             if :: win == W_IN -> replay(rkey, ans, w) :: else -> search(rkey, ans) fi;
#else
             lookup(rkey, ans);
#endif
             if
             :: ans == LK_SUCC || ans == LK_FAIL ->
                  complete(tok, (ans == LK_SUCC -> R_SUCC : R_FAIL), ok);
                  r = (ok -> (ans == LK_SUCC -> A_SUCC : A_FAIL) : A_RETRY)
             :: ans == LK_PEND -> mark_unknown(tok); r = A_RETRY
             :: ans == LK_NF && win == W_IN -> PERFORM_AGAIN_OK(rkey)        /* perform under the SAME key */
#ifdef CAP_STRIPE
             /* past the window, a proven "not found": the charge never happened (NOT_CHARGED_CODE) */
             :: ans == LK_NF && win != W_IN -> PROVE_NONE(rkey);
                  complete(tok, R_FAIL, ok); r = (ok -> A_FAIL : A_RETRY)
#else
             :: ans == LK_NF && win != W_IN -> mark_unknown(tok); r = A_RETRY /* needs a human */
#endif
             fi;
             BAIL
           }
#else
           PERFORM_AGAIN_OK(rkey)
#endif
         :: else -> skip
         fi;
         /* renewal before acting after a takeover (Ledger.extend / sql.extendOwnedLease); a fresh
            claim's own answer is its proof, like a renewal's (a zombie past either relies on A3) */
         if
         :: takeover ->
T_EXTEND_PERFORM:
           atomic {
             if
             :: owner == tok && rs == R_INPROG -> lease = L_LIVE
             :: else -> r = A_RETRY             /* ownership_lost: stop before acting */
             fi;
             BAIL
           }
         :: else -> skip
         fi;
T_PERFORM:
         atomic {
           inflight[w] = false;
           if
           :: fault_ok -> faults++;              /* definitely not sent (ECONNREFUSED) */
                if
#ifndef AS_SPECIFIED
                :: owner == tok && (rs == R_INPROG || rs == R_UNKNOWN) && taken ->
                     /* fix F1: after a takeover an earlier owner's request may still
                        arrive, so "not sent" proves nothing about the key: keep the
                        record, as unknown (sql.markOwnedUnknown) */
                     FENCE_OK(tok); rs = R_UNKNOWN; owner = 0; lease = L_NULL
                :: owner == tok && (rs == R_INPROG || rs == R_UNKNOWN) && !taken ->
#else
                :: owner == tok && (rs == R_INPROG || rs == R_UNKNOWN) ->
#endif
                     FENCE_OK(tok); rs = R_ABSENT; owner = 0; lease = L_NULL;  /* release */
#ifdef CAP_STRIPE
                     /* nothing was ever sent under the key (first claim only), and the next
                        claim creates a new record: the window's clock starts again with it */
                     win = W_IN; created = false
#else
                     skip
#endif
                :: else -> skip
                fi;
                r = A_RETRY
           :: true ->                             /* the request reaches the provider */
                resp[w] = RS_NONE; waiting[w] = true;
#ifdef CAP_STRIPE
                lag_ok = false;
#endif
                assert(k == K0);                      /* P4: only ever the charge's own key */
                if
                :: ps[rkey] == P_NONE -> ps[rkey] = P_PROC; proc_by[rkey] = w
                :: ps[rkey] == P_PROC -> resp[w] = RS_IDEM
                :: ps[rkey] == P_DONE -> resp[w] = pres[rkey]
                fi
           fi;
           BAIL
         };
T_AWAIT: atomic {
           if
           :: resp[w] != RS_NONE -> ans = resp[w]
           :: true -> ans = RS_NONE                 /* client timeout (response lost or slow) */
           fi;
           resp[w] = RS_NONE; waiting[w] = false
         }
         if
         :: ans == RS_SUCC || ans == RS_FAIL ->
T_EXTEND_COMPLETE:
           atomic {
             if
             :: owner == tok && rs == R_INPROG -> lease = L_LIVE
             :: else -> r = A_RETRY            /* renewal refused: do not complete */
             fi;
             BAIL
           };
T_COMPLETE:
           atomic {
             complete(tok, (ans == RS_SUCC -> R_SUCC : R_FAIL), ok);
             r = (ok -> (ans == RS_SUCC -> A_SUCC : A_FAIL) : A_RETRY);
             ans = 0; ok = false
           }
         :: else ->                               /* timeout, 5xx, idempotency_error */
T_MARK_UNKNOWN:
           atomic { mark_unknown(tok); r = A_RETRY }
         fi

       :: kind == T_RECON ->
         /* reconcileCharge */
T_RECON_GET:
         atomic {
           if
           :: rs == R_ABSENT ->
#ifdef CAP_STRIPE
                /* no claim: search, and "not found" means never started (settle.ts 'no_claim') */
                if
                :: effects[k] > 0 && indexed[k] -> ans = (obj_res[k] == RS_SUCC -> LK_SUCC : LK_FAIL)
                :: else -> ans = LK_NF
                fi;
#else
                lookup(k, ans);
#endif
                if
                :: ans == LK_SUCC -> r = A_SUCC
                :: ans == LK_FAIL -> r = A_FAIL
                :: ans == LK_PEND -> r = A_UNK
                :: ans == LK_NF -> PERFORM_AGAIN_OK(k); r = A_AGAIN    /* notStarted */
                fi
           :: final(rs) -> r = (rs == R_SUCC -> A_SUCC : A_FAIL)
           :: rs == R_INPROG && lease == L_LIVE -> r = A_UNK          /* a live claim: its owner acts */
           :: (rs == R_INPROG && lease != L_LIVE) || rs == R_UNKNOWN ->  /* takeOverUnresolved */
                tok = w + 1; ntok = tok; rs = R_INPROG; owner = tok; lease = L_LIVE; taken = true
           fi;
           BAIL
         };
T_RECON_LOOKUP:
         atomic {
#ifdef CAP_STRIPE
           search(rkey, ans);                 /* reconcileCharge has no request to replay */
#else
           lookup(rkey, ans);
#endif
           if
           :: ans == LK_SUCC || ans == LK_FAIL ->
                complete(tok, (ans == LK_SUCC -> R_SUCC : R_FAIL), ok);
                r = (ok -> (ans == LK_SUCC -> A_SUCC : A_FAIL) : A_UNK); ok = false
           :: ans == LK_PEND -> mark_unknown(tok); r = A_UNK
#ifdef CAP_STRIPE
           /* inside the window, what follows is chargePayment's replay under the same key: safe
              even if the charge exists but isn't indexed yet, so P5 doesn't apply (P1 does) */
           :: ans == LK_NF && win == W_IN -> mark_unknown(tok); r = A_AGAIN
           :: ans == LK_NF && win != W_IN -> PROVE_NONE(rkey);
                complete(tok, R_FAIL, ok); r = (ok -> A_FAIL : A_UNK); ok = false
#else
           :: ans == LK_NF ->
                mark_unknown(tok);
#ifdef RECON_UNGATED
                PERFORM_AGAIN_OK(rkey); r = A_AGAIN
#else
                if
                :: win == W_IN -> PERFORM_AGAIN_OK(rkey); r = A_AGAIN
                :: else -> r = A_UNK
                fi
#endif
#endif
           fi
         }
       fi;
report:
       atomic {
         if
         :: cur_w == w + 1 && res == A_NONE -> res = r   /* Temporal records the attempt's result */
         :: else -> skip                               /* a zombie's late result is discarded */
         fi;
         running[w] = false; inflight[w] = false; k = 0; kind = 0; tok = 0; r = 0; ans = 0; ok = false; takeover = false
       }
     } unless {
       atomic { kill[w] -> kill[w] = false;            /* worker crash at any step */
                if :: cur_w == w + 1 -> att_dead = true :: else -> skip fi;
                running[w] = false; inflight[w] = false; resp[w] = RS_NONE; waiting[w] = false;
                k = 0; kind = 0; tok = 0; r = 0; ans = 0; ok = false; takeover = false }
     }
  od
}

/* crashes: any running worker may die at any step */
active proctype killer() {
end_k:
  do
  :: atomic { fault_ok && running[0] && !kill[0] -> faults++; kill[0] = true }
  :: atomic { fault_ok && running[1] && !kill[1] -> faults++; kill[1] = true }
  od
}

/* ---------------------------------------------------------------- provider */

#define deliverable(p) (waiting[p] && resp[p] == RS_NONE)

active proctype provider() {
  byte k;
end_p:
  do
  :: atomic {
       (ps[0] == P_PROC || ps[1] == P_PROC) ->
       if :: ps[0] == P_PROC -> k = 0 :: ps[1] == P_PROC -> k = 1 fi;
       if
       :: true ->                                      /* T_PROVIDER_EFFECT */
            effects[k]++; assert(effects[k] <= 1);     /* P1 */
            if :: pres[k] = RS_SUCC :: pres[k] = RS_FAIL fi;
#ifdef CAP_STRIPE
            assert(!proved_none || k != K0);           /* P6 */
            obj_res[k] = pres[k]; indexed[k] = false;
#endif
            ps[k] = P_DONE;
            if
            :: deliverable(proc_by[k]) -> resp[proc_by[k]] = pres[k]
            :: !deliverable(proc_by[k]) -> skip        /* the client gave up: nobody reads it */
            :: deliverable(proc_by[k]) && fault_ok -> faults++   /* T_PROVIDER_LOSE: response lost */
            fi;
            proc_by[k] = 0; k = 0
       :: fault_ok -> faults++;                        /* T_PROVIDER_5XX: fails before any effect */
            ps[k] = P_NONE;
            if :: deliverable(proc_by[k]) -> resp[proc_by[k]] = RS_5XX :: else -> skip fi;
            proc_by[k] = 0; k = 0
       fi
     }
  :: atomic { win == W_OUT && ps[0] == P_DONE -> ps[0] = P_NONE; pres[0] = 0 }   /* T_PROVIDER_FORGET */
  :: atomic { win == W_OUT && ps[1] == P_DONE -> ps[1] = P_NONE; pres[1] = 0 }
  od
}

/* ---------------------------------------------------------------- clocks */

#define quiet (!inflight[0] && !inflight[1] && ps[0] != P_PROC && ps[1] != P_PROC)

active proctype clock() {
end_c:
  do
  :: atomic { lease == L_LIVE -> lease = L_EXPIRED }                 /* T_LEASE_EXPIRE */
  /* Assumption A2: the key window (24 h) can only run out while the order is
     parked in needs_attention; every active phase (Temporal retries, the
     reconcile horizon <= W/2) is far shorter than W. */
  :: atomic { win == W_IN && created && parked -> win = W_MARGIN }  /* T_WINDOW_GUARD_CLOSES */
  /* Assumption A1: a request whose claim or window guard passed reaches the
     provider, and the provider finishes processing it, before the provider
     forgets the key (margin >= that delay). */
  :: atomic { win == W_MARGIN && parked && quiet -> win = W_OUT }   /* T_WINDOW_ENDS */
#ifdef CAP_STRIPE
  /* Safety only: the window may close at any time, not just while parked (a stronger check
     than A2: a worker outage longer than the window). */
  :: atomic { win == W_IN && created && !parked -> win = W_MARGIN }
  :: atomic { win == W_MARGIN && !parked && quiet -> win = W_OUT }
  :: atomic { effects[0] > 0 && !indexed[0] -> indexed[0] = true }  /* T_INDEX_CATCHES_UP */
  :: atomic { effects[1] > 0 && !indexed[1] -> indexed[1] = true }
  /* Assumption A4: the declared lag bounds the index's real lag, so the lag has passed
     only once every charge is searchable and no request is on its way (T_LAG_PASSES). */
  :: atomic { !lag_ok && quiet && (effects[0] == 0 || indexed[0]) && (effects[1] == 0 || indexed[1]) -> lag_ok = true }
#endif
  od
}

/* ---------------------------------------------------------------- operator */

active proctype operator() {
  byte ans, out;
end_o:
  do
  :: atomic {                                          /* T_OP_RESOLVE: Operator.resolveUnknown */
       !resolved && (rs == R_UNKNOWN || (rs == R_INPROG && lease != L_LIVE)) ->
       resolved = true;
#ifdef CAP_STRIPE
       search(rkey, ans);                              /* #refuseContradiction (findCharge) */
#else
       lookup(rkey, ans);                              /* #refuseContradiction */
#endif
       if
       :: ans == LK_SUCC -> out = R_SUCC
       :: ans == LK_FAIL -> out = R_FAIL
       :: ans == LK_NF -> out = R_FAIL                 /* succeeded is refused */
       :: ans == LK_PEND -> if :: out = R_SUCC :: out = R_FAIL fi
       fi;
       rs = out; owner = 0; lease = L_NULL;           /* Ledger.settle / sql.settleUnowned */
       if :: final_val == R_ABSENT -> final_val = out :: else -> skip fi;
       if :: !charge_settled -> pay_event = (out == R_SUCC -> A_SUCC : A_FAIL) :: else -> skip fi
     }
  :: atomic { parked && redrives < MAX_REDRIVES ->     /* T_OP_REDRIVE: Operator.redrive (refused unless parked) */
       redrive_req = true; redrives++ }
  od
}

/* ---------------------------------------------------------------- workflow */

/* one activity call with Temporal's retry policy: attempts 1..max, each may time out */
inline activity(kind, max, out) {
  n = 0; out = A_NONE;
  do
  :: n < max ->
       n++;
       atomic { cur_w = 0; res = A_NONE; att_dead = false;
                task = kind; task_key = ckey; task_taken = false }
       if
       :: atomic { res != A_NONE -> task = T_NONE; out = res }
       :: atomic { att_dead -> task = T_NONE; out = A_RETRY }           /* heartbeat timeout after a crash */
       :: atomic { fault_ok && task_taken -> faults++; task = T_NONE; cur_w = 0; out = A_RETRY }
                                                                         /* T_ZOMBIE: timeout, worker still running */
       fi;
       if
       :: out == A_RETRY && n < max -> skip                            /* Temporal retries */
       :: else -> break
       fi
  :: else -> break
  od
}

/* applyPaymentEvent: settleCharge (Ledger.settle; a final record answers with its outcome) */
inline apply_event(out) {
  atomic {
    if
    :: pay_event != A_NONE ->
         pay_event = A_NONE;
         assert(final(rs));
         out = (rs == R_SUCC -> A_SUCC : A_FAIL)
    :: else -> out = A_NONE
    fi
  }
}

init {
  atomic { run worker(0); run worker(1) }
}

active proctype workflow() {
  byte n, out, r;
  byte ckey = 0;                     /* stepKeys.charge(workflowId) */
  wf = WS_PENDING;
CHARGE:
  activity(T_CHARGE, CHARGE_MAX, out);                               /* T_WF_CHARGE */
  if
  :: out == A_SUCC || out == A_FAIL -> goto SETTLED
  :: else -> skip
  fi;
UNKNOWN:
  wf = WS_UNKNOWN;                                                    /* transition('payment_unknown') */
  r = 0;
  do
  :: apply_event(out);
     if
     :: out != A_NONE -> goto SETTLED
     :: else -> skip
     fi;
     if
     :: r < RECON_MAX ->
          r++;
          activity(T_RECON, 1, out);                                 /* T_WF_RECONCILE */
          if
          :: out == A_SUCC || out == A_FAIL -> goto SETTLED
          :: out == A_AGAIN -> goto CHARGE                            /* performAgain */
          :: else -> skip                                             /* pending / error: durable timer */
          fi
     :: else -> break                                                 /* horizon passed */
     fi
  od;
  wf = WS_ATTN; parked = true;                                        /* T_WF_PARK: needs_attention */
end_parked:                                                           /* parked is a valid end: needs_attention */
  atomic { redrive_req || pay_event != A_NONE -> parked = false; redrive_req = false }
  apply_event(out);
  if
  :: out != A_NONE -> goto SETTLED
  :: else -> skip
  fi;
#ifdef MUT_NEW_KEY
  ckey = 1;
  goto CHARGE;
#endif
  goto UNKNOWN;                                                       /* re-driven: reconcile again */
SETTLED:
  atomic {
    charge_settled = true; pay_event = A_NONE;
    /* the workflow's outcome is the ledger's (reconcileCharge may settle from the
       provider's word alone when no record exists: see MODEL.md, finding F2) */
    assert(!final(rs) || ((out == A_SUCC) == (rs == R_SUCC)));
    wf = (out == A_SUCC -> WS_PAID : WS_REJECTED)
  }
}

/* P3: a completed record is final (checked in every state) */
active proctype monitor() {
end_m:
  atomic { !(final_val == R_ABSENT || rs == final_val) -> assert(false) }
}

/* Liveness (run with -DLIVENESS, pan -a -f): the order is settled (paid or
   rejected) or parked in needs_attention infinitely often, i.e. it never
   loops forever without reaching one of them (after the last re-drive it
   stays there). Under weak fairness; the provider eventually answers
   because every fault is drawn from the MAX_FAULTS budget. */
#define done (wf == WS_PAID || wf == WS_REJECTED || wf == WS_ATTN)
#ifdef LIVENESS
ltl live { [] <> done }
#endif
