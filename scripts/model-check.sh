#!/usr/bin/env bash
# npm run model:check: model-checks the claim protocol (model/ledger.pml, see
# docs/MODEL.md) with SPIN. Runs the safety check and the liveness check of
# the real model (both must find no error), then every mutant and the
# as-specified variant (each MUST yield a counterexample for the expected
# property: a model that cannot fail proves nothing). Prints state-space size
# and time per run. Installs Debian's spin when missing and running as root.
source "$(dirname "$0")/lib.sh"

MODEL="${MODEL_FILE:-$ROOT/model/ledger.pml}"

ensure_spin() {
  if command -v spin >/dev/null 2>&1; then
    return 0
  fi
  if ! apt_install_as_root spin "for the model check"; then
    echo "[model] error: SPIN is not installed: Debian: sudo apt-get install spin gcc; macOS: brew install spin (and xcode-select --install for cc)" >&2
    exit 1
  fi
}

ensure_spin
command -v gcc >/dev/null 2>&1 || {
  echo "[model] error: gcc is required to compile SPIN's verifier" >&2
  exit 1
}

WORK="$(mktemp -d "${TMPDIR:-/tmp}/onceflow-model.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
FAILED=0
# Exhaustive search, compressed state storage; MEMLIM makes pan stop (and
# this script fail) instead of swapping if the world ever grows too large.
CFLAGS=(-w -DMEMLIM=3072 -DCOLLAPSE -DVECTORSZ=2048)

# run NAME EXPECT MODE OPT [spin -D flags...]
#   EXPECT: "pass", or the text of the assertion (or "acceptance cycle") the
#           counterexample must show.
#   MODE: safety | liveness.  OPT: gcc optimisation; compiling pan.c at -O2
#   costs more than a small search saves, so the mutants use -O0.
run() {
  local name="$1" expect="$2" mode="$3" opt="$4"
  shift 4
  local dir="$WORK/$name"
  mkdir -p "$dir"
  cp "$MODEL" "$dir/ledger.pml"
  local out rc=0
  # Success is marked by an "ok" file; anything else (including dying half-way) fails.
  (
    cd "$dir"
    if [ "$mode" = liveness ]; then
      spin "$@" -DLIVENESS -a ledger.pml >spin.log 2>&1
      gcc "$opt" "${CFLAGS[@]}" -DNFAIR=3 -o pan pan.c
      ./pan -a -f -m200000 -w24 >pan.log 2>&1
    else
      spin "$@" -a ledger.pml >spin.log 2>&1
      gcc "$opt" "${CFLAGS[@]}" -DSAFETY -o pan pan.c
      ./pan -m200000 -w24 >pan.log 2>&1
    fi
  ) || rc=$?
  out="$dir/pan.log"
  if [ ! -s "$out" ]; then
    echo "[model] $name: FAILED to build or run (rc $rc)"
    cat "$dir/spin.log" 2>/dev/null || true
    return
  fi
  local errors states visited elapsed
  errors="$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | head -1)"
  states="$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$out" | head -1)"
  visited="$(sed -n 's/.*states, stored (\([0-9.e+]*\) visited).*/\1/p' "$out" | head -1)"
  elapsed="$(sed -n 's/^pan: elapsed time \([0-9.e+]*\) seconds.*/\1/p' "$out" | head -1)"
  local size="${states:-?} states stored${visited:+ ($visited visited)}"
  if grep -qE 'max search depth too small|out of memory|aborting' "$out"; then
    echo "[model] $name: FAILED, search incomplete:"
    grep -E 'max search depth too small|out of memory|aborting' "$out" || true
    return
  fi
  if [ "$expect" = pass ]; then
    if [ "$errors" = 0 ]; then
      echo "[model] $name: ok, no errors; $size, ${elapsed:-?} s"
      touch "$dir/ok"
    else
      echo "[model] $name: FAILED, $errors error(s); $size, ${elapsed:-?} s"
      grep -E '^pan:|assertion violated|acceptance cycle' "$out" | head -5 || true
      local live=()
      [ "$mode" = liveness ] && live=(-DLIVENESS)
      echo "[model] the trail's last steps (replay: spin $* ${live[*]} -t -p model/ledger.pml after a pan run):"
      (cd "$dir" && spin "$@" "${live[@]}" -t -p ledger.pml | grep -E '^ *[0-9]+:' | tail -40) || true
      fi
  else
    local violated
    violated="$(grep -E 'assertion violated|acceptance cycle' "$out" | head -1 || true)"
    if [ "${errors:-0}" != 0 ] && grep -qF -- "$expect" <<<"$violated"; then
      local depth
      depth="$(sed -n 's/.*(at depth \([0-9]*\)).*/\1/p' "$out" | head -1)"
      echo "[model] $name: caught as expected: ${violated#pan:1: } (trail of ${depth:-?} steps); $size, ${elapsed:-?} s"
      touch "$dir/ok"
    else
      echo "[model] $name: FAILED, expected a counterexample violating '$expect', got: ${violated:-no error}"
      fi
  fi
}

echo "[model] $(spin -V | head -1); ${MODEL_JOBS:-2} runs at a time"
began=$SECONDS
NAMES=()
# launch NAME ...: runs `run NAME ...` in the background, at most MODEL_JOBS at once
# (pan is single-threaded; on 2 cores two runs halve the wall time).
launch() {
  while [ "$(jobs -rp | wc -l)" -ge "${MODEL_JOBS:-2}" ]; do
    wait -n || true
  done
  NAMES+=("$1")
  mkdir -p "$WORK/$1"
  (run "$@" >"$WORK/$1.report" 2>&1) &
}
# The real model (PROTOCOL.md + fix F1, see docs/MODEL.md). Liveness with one
# fault by default (about 4 M states visited); MODEL_LIVENESS_FAULTS=2 checks it
# with two (about 29 M visited, 0 errors).
launch safety pass safety -O2
launch liveness pass liveness -O2 -DMAX_FAULTS="${MODEL_LIVENESS_FAULTS:-1}"
# The protocol exactly as PROTOCOL.md specifies it (without fix F1) charges twice.
# Its trail needs no second attempt or reconcile per round, so the smaller world
# finds it at a third of the cost.
launch as-specified-finding-F1 'effects[k]<=1' safety -O1 -DAS_SPECIFIED -DCHARGE_MAX=1 -DRECON_MAX=1
# Mutants: each must be caught, for the property it breaks.
launch mutant-no-fence 'tok==ntok' safety -O0 -DMUT_NO_FENCE
launch mutant-no-reconcile 'effects[k]<=1' safety -O0 -DMUT_NO_RECONCILE -DNO_P5
launch mutant-pending-as-not-found 'ps[rkey]==0' safety -O0 -DMUT_PENDING_AS_NF
launch mutant-new-key 'k==0' safety -O0 -DMUT_NEW_KEY
# The provider with Stripe's capabilities (replay under the same key inside the window,
# search with a lagging index after it; the window may close at any time): P1-P6 hold.
launch stripe-safety pass safety -O2 -DCAP_STRIPE
# Treating a lagging search's "not found" as proof that nothing was charged is caught (P6).
launch mutant-lag-as-proof 'proved_none' safety -O0 -DCAP_STRIPE -DMUT_LAG_AS_PROOF
# The liveness check can fail too: performAgain outside the key window loops forever.
launch mutant-recon-ungated 'acceptance cycle' liveness -O0 -DRECON_UNGATED -DMAX_FAULTS=0
wait
for name in "${NAMES[@]}"; do
  cat "$WORK/$name.report"
  # Success is marked explicitly: a run that died half-way (set -e) counts as failed.
  [ -e "$WORK/$name/ok" ] || FAILED=1
done
echo "[model] total $((SECONDS - began)) s wall"
if [ "$FAILED" != 0 ]; then
  echo "[model] model check FAILED" >&2
  exit 1
fi
echo "[model] model check passed"
