#!/usr/bin/env bash
# bertprep on a GPU, in one command (under 8 minutes on one GPU): correctness against the CPU, 200 training
# steps, and tokens/s + MFU against transformers for BERT-Base and ModernBERT-base (benchmarks/gpu_check.py says
# what each section does). Paste what it prints (or OUT/run-N/summary.md: each run writes into a new run-N, named
# in its first lines) into an issue.
#
#   bash benchmarks/gpu_check.sh                     # builds demo shards with bertprep make-shards, then runs
#   bash benchmarks/gpu_check.sh --shards-128 S128 --shards-512 S512 --out OUT   # shards made elsewhere
#                                                    (--shards-128 alone: no 512-token measurements)
#
# Other options go to gpu_check.py (--budget-minutes, --tokens-per-step, --steps, --select, --kernels...). Without a CUDA GPU it says
# so and runs a CPU self-test of its own plumbing (tiny models, a few steps). Exit status: 1 when a correctness
# check fails, else 0. bertprep is imported from this checkout when it is not installed (only torch, numpy,
# pyarrow, tokenizers, safetensors, tqdm and click are needed then; transformers for the comparisons).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
PYTHON=${PYTHON:-python3}

out=gpu-check-out
shards_128=""
shards_512=""
rest=()
needs_value() {  # $1 = option, $2 = the number of arguments left: one line and exit 2 when its value is missing
  if [ "$2" -lt 2 ]; then echo "gpu_check.sh: $1 needs a value (a folder)" >&2; exit 2; fi
}
while [ $# -gt 0 ]; do
  case "$1" in
    --out) needs_value "$1" $#; out=$2; shift 2 ;;
    --shards-128) needs_value "$1" $#; shards_128=$2; shift 2 ;;
    --shards-512) needs_value "$1" $#; shards_512=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) rest+=("$1"); shift ;;
  esac
done
if [ -e "$out" ] && [ ! -d "$out" ]; then
  echo "gpu_check.sh: --out $out is a file, not a folder; name a folder for the results" >&2
  exit 2
fi
for given in "$shards_128" "$shards_512"; do
  if [ -n "$given" ] && [ ! -f "$given/manifest.json" ]; then
    echo "gpu_check.sh: $given is not a shard folder (no manifest.json); pass make-shards output" >&2
    exit 2
  fi
done
mkdir -p "$out" || exit 2

if ! "$PYTHON" -c "import bertprep.bert_model" 2>/dev/null; then
  shim=$(mktemp -d)
  trap 'rm -rf "$shim"' EXIT
  mkdir -p "$shim/bertprep"
  for part in pipeline bert_model cli; do ln -s "$repo/$part" "$shim/bertprep/$part"; done
  export PYTHONPATH="$shim${PYTHONPATH:+:$PYTHONPATH}"
fi

make_shards() {  # $1 = max_seq_length, $2 = max_predictions_per_seq
  local dir="$out/shards-$1"
  if [ ! -f "$dir/manifest.json" ]; then
    if [ ! -f "$out/vocab/vocab.txt" ]; then
      "$PYTHON" -m bertprep.cli.main build-vocab -o "$out/vocab" --vocab-size 8000 >&2 || return 1
    fi
    "$PYTHON" -m bertprep.cli.main make-shards --vocab "$out/vocab/vocab.txt" -o "$dir" --max-seq-length "$1" \
      --max-predictions-per-seq "$2" --dupe-factor 2 -q >&2 || return 1
  fi
  echo "$dir"
}

if [ -z "$shards_128" ]; then  # no shards given: the demo corpus at 128 and 512 tokens
  shards_128=$(make_shards 128 20) || {
    echo "could not make the demo shards (bertprep make-shards needs apache-beam): make them where bertprep is" \
      "installed and pass --shards-128 DIR --shards-512 DIR" >&2
    exit 2
  }
  [ -n "$shards_512" ] || shards_512=$(make_shards 512 76) || shards_512=""
fi

self_test=()
if ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "no CUDA GPU here: running the CPU self-test of this script's plumbing (tiny models, a few steps), no figures"
  self_test=(--self-test)
fi
args=(--shards-128 "$shards_128" --out "$out")
[ -n "$shards_512" ] && args+=(--shards-512 "$shards_512")
"$PYTHON" "$here/gpu_check.py" "${args[@]}" "${self_test[@]}" "${rest[@]}"
