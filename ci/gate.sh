#!/usr/bin/env bash
# The project's own decoding gate, on deterministic metrics only. Two greedy runs at a fixed
# seed on the embedded default target (SmolLM2-135M), the smoke suite, checked against the
# baselines committed in ci/:
#   - ar,sd with the n-gram draft (ci/baseline/): every variant's outputs token-identical to
#     the baseline's and to this run's ar, and acceptance length exactly the baseline's (a
#     change means decoding behaviour changed). The n-gram draft is wrong often (acceptance
#     ~15%), so a broken acceptance rule shows up in the outputs; the int8 self-draft agrees
#     with this target on nearly every token and would hide one.
#   - ar,ssd with the int8 self-draft in its own process (ci/baseline-ssd/): outputs identical
#     to the baseline's and to ar's. ssd's acceptance is not gated: how deep the draft's tree
#     grows before each request arrives depends on timing. Nor is the int8 draft's kernel
#     (--allow-mismatch-in kernels): the probe picks what runs here, and outputs equal ar's
#     whatever the draft computes.
# Timings are not gated: they depend on the machine and its load. Runs on any CPU model: the
# baselines' hardware may differ from this machine's (--allow-mismatch-in hardware; the
# difference is printed); weights, dtype, attention backend and suite must still match.
#
#   ci/gate.sh                   run both, then gate (exit 0 pass, 1 regression, 2 unusable input)
#   ci/gate.sh --candidate DIR   gate an existing ar,sd run directory instead of running it
#   ci/gate.sh --candidate-ssd DIR  likewise for the ar,ssd run
#   ci/gate.sh --update          re-record both baselines (from a clean, committed tree; commit them)
# Other arguments go to `ssdbench compare` (e.g. --format markdown).
# SSDBENCH overrides the command (default: .venv/bin/ssdbench, else ssdbench on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z "${SSDBENCH:-}" ]]; then
  if [[ -x .venv/bin/ssdbench ]]; then SSDBENCH=.venv/bin/ssdbench; else SSDBENCH=ssdbench; fi
fi
BASELINE=ci/baseline
BASELINE_SSD=ci/baseline-ssd
# --linear-kernel matmul: the one dense kernel every CPU runs, so the kernels match the baselines' on any machine
COMMON=(--suite smoke --num-prompts 6 --max-new-tokens 24 --k 4 --temperature 0 --seed 0 --threads 2 --linear-kernel matmul)
RUN_ARGS=("${COMMON[@]}" --methods ar,sd --draft ngram)
RUN_ARGS_SSD=("${COMMON[@]}" --methods ar,ssd --draft self-int8 --backup jit --no-timeline)
FAIL_ON=outputs_match:false,acceptance_length:exact
FAIL_ON_SSD=outputs_match:false

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

candidate="" candidate_ssd=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --candidate) candidate=${2:?--candidate needs a run directory}; shift 2 ;;
    --candidate-ssd) candidate_ssd=${2:?--candidate-ssd needs a run directory}; shift 2 ;;
    --update)
      if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
        echo "ci/gate.sh --update: the tree has uncommitted changes; commit first so the baseline names a commit" >&2
        exit 2
      fi
      $SSDBENCH run "${RUN_ARGS[@]}" --out "$scratch/baseline"
      $SSDBENCH run "${RUN_ARGS_SSD[@]}" --out "$scratch/baseline-ssd"
      rm -rf "$BASELINE" "$BASELINE_SSD"
      cp -r "$scratch/baseline" "$BASELINE"
      cp -r "$scratch/baseline-ssd" "$BASELINE_SSD"
      echo "re-recorded $BASELINE and $BASELINE_SSD; commit them"
      exit 0 ;;
    *) break ;;
  esac
done
if [[ -z "$candidate" ]]; then
  candidate="$scratch/candidate"
  $SSDBENCH run "${RUN_ARGS[@]}" --out "$candidate"
fi
if [[ -z "$candidate_ssd" ]]; then
  candidate_ssd="$scratch/candidate-ssd"
  $SSDBENCH run "${RUN_ARGS_SSD[@]}" --out "$candidate_ssd"
fi
status=0
$SSDBENCH compare --baseline "$BASELINE" "$candidate" --fail-on "$FAIL_ON" --allow-mismatch-in hardware "$@" || status=$?
code=0
$SSDBENCH compare --baseline "$BASELINE_SSD" "$candidate_ssd" --fail-on "$FAIL_ON_SSD" --allow-mismatch-in hardware,kernels "$@" \
  || code=$?
exit $(( status > code ? status : code ))
