#!/usr/bin/env bash
# The project's own performance gate, on deterministic metrics only: runs the smoke suite on
# the embedded default target (SmolLM2-135M) with the n-gram draft, greedy, fixed seed, then
# checks against the committed baseline in ci/baseline/ that
#   - every variant's outputs are token-identical to the baseline's and to this run's ar, and
#   - acceptance length is exactly the baseline's (a change means decoding behaviour changed).
# Timings are not gated here: they depend on the machine and its load. The n-gram draft is
# wrong often (acceptance ~15%), so a broken acceptance rule shows up in the outputs; the int8
# self-draft agrees with this target on nearly every token and would hide one.
#
#   ci/gate.sh                  run, then gate (exit 0 pass, 1 regression, 2 unusable input)
#   ci/gate.sh --candidate DIR  gate an existing run directory instead of running
#   ci/gate.sh --update         re-record ci/baseline/ (after an intended change; commit it)
# Other arguments go to `ssdbench compare` (e.g. --allow-mismatch on other hardware, --format markdown).
# SSDBENCH overrides the command (default: .venv/bin/ssdbench, else ssdbench on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z "${SSDBENCH:-}" ]]; then
  if [[ -x .venv/bin/ssdbench ]]; then SSDBENCH=.venv/bin/ssdbench; else SSDBENCH=ssdbench; fi
fi
BASELINE=ci/baseline
RUN_ARGS=(--suite smoke --num-prompts 6 --max-new-tokens 24 --methods ar,sd --draft ngram --k 4
          --temperature 0 --seed 0 --threads 2)
FAIL_ON=outputs_match:false,acceptance_length:exact

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

candidate=""
if [[ "${1:-}" == "--candidate" ]]; then
  candidate=${2:?--candidate needs a run directory}
  shift 2
elif [[ "${1:-}" == "--update" ]]; then
  $SSDBENCH run "${RUN_ARGS[@]}" --out "$scratch/baseline"
  rm -rf "$BASELINE"
  cp -r "$scratch/baseline" "$BASELINE"
  echo "re-recorded $BASELINE; commit it"
  exit 0
fi
if [[ -z "$candidate" ]]; then
  candidate="$scratch/candidate"
  $SSDBENCH run "${RUN_ARGS[@]}" --out "$candidate"
fi
$SSDBENCH compare --baseline "$BASELINE" "$candidate" --fail-on "$FAIL_ON" "$@"
