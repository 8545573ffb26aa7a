#!/usr/bin/env bash
# Round trip of the out-of-tree GPT-2 plugin: build small GPT-2 checkpoints (with and without the
# `transformer.` prefix, tied and untied, several dtypes), load every rank of tp_size 1, 2 and 4
# with the installed `wmap` CLI and this build's plugin folder, and compare each dump bit for bit
# with wmap's independent reference (tests/python/reference.py). Fails if any rank mismatches.
#
#   run_test.sh --wmap BIN --plugin-dir DIR --reference reference.py --python PY \
#               --maker make_gpt2_checkpoint.py --work DIR
set -u

WMAP=wmap PLUGIN_DIR= REFERENCE= PYTHON=/usr/bin/python3 WORK= MAKER=
HERE=$(cd "$(dirname "$0")" && pwd)
MAKER=$HERE/make_gpt2_checkpoint.py
while [ $# -gt 0 ]; do
  case $1 in
    --wmap) WMAP=$2; shift 2 ;;
    --plugin-dir) PLUGIN_DIR=$2; shift 2 ;;
    --reference) REFERENCE=$2; shift 2 ;;
    --python) PYTHON=$2; shift 2 ;;
    --maker) MAKER=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    *) echo "run_test.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for v in PLUGIN_DIR REFERENCE WORK; do
  [ -n "${!v}" ] || { echo "run_test.sh: --$(echo $v | tr A-Z_ a-z-) is required" >&2; exit 2; }
done
[ -f "$PLUGIN_DIR/gpt2.yaml" ] || { echo "run_test.sh: $PLUGIN_DIR/gpt2.yaml missing (the mapping must lie beside the plugin)" >&2; exit 2; }
ls "$PLUGIN_DIR"/libwmap_plugin_gpt2.so >/dev/null || exit 2

# Keep the environment from adding or overriding plugins and mapping files.
unset WMAP_PLUGIN_PATH WMAP_MAPPINGS_PATH

rm -rf "$WORK" && mkdir -p "$WORK" || exit 2
failures=0 checked=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# name | maker options
CASES=(
  "prefix_tied_f16|--with-prefix --dtype F16"
  "noprefix_tied_f32|--no-prefix --dtype F32 --seed 1"
  "prefix_untied_bf16|--with-prefix --untied --dtype BF16 --seed 2"
  "noprefix_untied_f16|--no-prefix --untied --dtype F16 --n-embd 40 --n-head 4 --n-layer 3 --n-inner 150 --vocab-size 103 --seed 3"
)

for c in "${CASES[@]}"; do
  name=${c%%|*} opts=${c#*|}
  ckpt=$WORK/$name
  # shellcheck disable=SC2086
  "$PYTHON" "$MAKER" "$ckpt" $opts || { fail "$name: checkpoint maker"; continue; }
  for T in 1 2 4; do
    # The plan must be complete: every tensor consumed or ignored (mask buffers), nothing missing.
    if ! "$WMAP" plan "$ckpt" --tp-size "$T" --tp-rank 0 --plugin-dir "$PLUGIN_DIR" >"$WORK/$name.plan$T.log" 2>&1; then
      fail "$name tp=$T: wmap plan is not complete"; cat "$WORK/$name.plan$T.log"
    elif ! grep -q "plugin gpt2, mapping gpt2.yaml" "$WORK/$name.plan$T.log"; then
      fail "$name tp=$T: the plan did not use the gpt2 plugin with gpt2.yaml"; cat "$WORK/$name.plan$T.log"
    fi
    for ((R = 0; R < T; R++)); do
      dump=$WORK/$name.tp$T.r$R.safetensors
      log=$WORK/$name.tp$T.r$R.log
      checked=$((checked + 1))
      if ! "$WMAP" -q load "$ckpt" --tp-size "$T" --tp-rank "$R" --plugin-dir "$PLUGIN_DIR" --dump "$dump" >"$log" 2>&1; then
        fail "$name tp=$T rank=$R: wmap load failed"; cat "$log"; continue
      fi
      if out=$("$PYTHON" "$REFERENCE" check "$ckpt" "$dump" --tp-size "$T" --tp-rank "$R" 2>&1); then
        echo "ok   $name tp=$T rank=$R: $(echo "$out" | tail -n 1)"
      else
        fail "$name tp=$T rank=$R: dump differs from the reference"; echo "$out"
      fi
    done
  done
done

# This plugin places no module on a pipeline stage (ModelSpec::pipeline unset): pp_size 2 is
# refused by name, before any read, rather than loading every layer on every stage.
ckpt=$WORK/prefix_tied_f16
if [ -d "$ckpt" ]; then
  checked=$((checked + 1))
  if out=$("$WMAP" plan "$ckpt" --pp-size 2 --pp-rank 1 --plugin-dir "$PLUGIN_DIR" 2>&1); then
    fail "pp_size 2: a plugin without stage placement was not refused"; echo "$out"
  elif ! echo "$out" | grep -q "pp_size 2 is not served"; then
    fail "pp_size 2: refused without the reason"; echo "$out"
  else
    echo "ok   pp_size 2 refused: $(echo "$out" | grep -m1 "pp_size 2")"
  fi
fi

# The checker must be able to fail: a dump with one flipped byte is refused.
probe=$WORK/prefix_tied_f16.tp2.r1.safetensors
if [ -f "$probe" ]; then
  cp "$probe" "$WORK/corrupt.safetensors"
  "$PYTHON" -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[-1] ^= 0xff; open(sys.argv[1], "wb").write(b)' \
    "$WORK/corrupt.safetensors"
  if cmp -s "$probe" "$WORK/corrupt.safetensors" ||
     "$PYTHON" "$REFERENCE" check "$WORK/prefix_tied_f16" "$WORK/corrupt.safetensors" --tp-size 2 --tp-rank 1 >/dev/null 2>&1; then
    fail "self-check: a corrupted dump was not detected"
  else
    echo "ok   self-check: a corrupted dump is detected"
  fi
fi

echo "GPT-2 plugin: $checked rank loads checked, $failures failure(s)"
[ "$failures" -eq 0 ]
