#!/usr/bin/env bash
# Builds the peers of issue 42 from their public sources, unpacked OUTSIDE this tree, and our
# harnesses that drive them, then runs bench/peers/compare.py (wmap against them, equal footing).
#
#   bench/peers.sh SRC_DIR [--build-dir DIR] [--build-only] [compare.py options...]
#
# SRC_DIR holds:
#   runai-model-streamer/  run-ai/runai-model-streamer (any commit; measured at f73a19a)
#   safetensors/           huggingface/safetensors at tag v0.6.2 (the newest whose crate builds
#                          against Debian 12's librust-* crates)
# Each either a git clone, or an unpacked archive with a COMMIT file holding the commit, e.g.
#   git clone https://github.com/run-ai/runai-model-streamer SRC_DIR/runai-model-streamer
#   mkdir -p SRC_DIR/safetensors && git -C CLONE archive v0.6.2 | tar -x -C SRC_DIR/safetensors \
#     && git -C CLONE rev-parse 'v0.6.2^{commit}' > SRC_DIR/safetensors/COMMIT
# Outputs go to SRC_DIR/build (or --build-dir): runai/libstreamer.so, runai_harness,
# safetensors_harness_bin (its crate copy in safetensors_harness/), commits.txt. Nothing is
# written into this tree. PEERS_JOBS (default 2) compiles in parallel, at nice 15.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] && [ "${1#-}" = "$1" ] || usage
SRC="$(cd "$1" && pwd)"; shift
BUILD="$SRC/build"; BUILD_ONLY=0; PASS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD="$2"; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    -h|--help) usage ;;
    *) PASS+=("$1"); shift ;;
  esac
done
RUNAI="$SRC/runai-model-streamer"; HF="$SRC/safetensors"
for d in "$RUNAI/cpp/streamer" "$HF/safetensors/src"; do
  [ -d "$d" ] || { echo "peers.sh: $d missing (see the usage above)" >&2; exit 2; }
done
mkdir -p "$BUILD"; BUILD="$(cd "$BUILD" && pwd)"
JOBS="${PEERS_JOBS:-2}"

commit_of() {  # a clone's HEAD, else the COMMIT file written when unpacking
  if git -C "$1" rev-parse --is-inside-work-tree >/dev/null 2>&1 && [ "$(git -C "$1" rev-parse --show-toplevel)" = "$1" ]; then
    git -C "$1" rev-parse HEAD
  elif [ -s "$1/COMMIT" ]; then
    tr -d ' \n' < "$1/COMMIT"
  else
    echo "peers.sh: $1 has neither .git nor a COMMIT file; write the commit into $1/COMMIT" >&2; exit 2
  fi
}
RUNAI_COMMIT="$(commit_of "$RUNAI")"; HF_COMMIT="$(commit_of "$HF")"
printf 'runai-model-streamer %s\nsafetensors %s\n' "$RUNAI_COMMIT" "$HF_COMMIT" > "$BUILD/commits.txt"
echo "peers.sh: run-ai/runai-model-streamer $RUNAI_COMMIT, huggingface/safetensors $HF_COMMIT -> $BUILD"

# --- Debian packages, only those missing -------------------------------------------------------
# The crates come from Debian (/usr/share/cargo/registry); cargo builds offline against them.
PACKAGES=(g++ nlohmann-json3-dev librust-serde-dev librust-serde-derive-dev librust-serde-json-dev
          librust-memmap2-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# safetensors 0.6.2 declares rust-version 1.80: Debian 12's own cargo (rustc 1.63) is too old,
# its cargo-web (1.85+) is not. Any cargo on PATH that is new enough (rustup's) is used as is.
rust_ok() { command -v cargo >/dev/null && command -v rustc >/dev/null &&
            [ "$(printf '1.80.0\n%s\n' "$(rustc --version | cut -d' ' -f2)" | sort -V | head -1)" = 1.80.0 ]; }
if ! rust_ok; then
  if apt-cache show cargo-web >/dev/null 2>&1; then missing+=(cargo-web); else missing+=(cargo); fi
fi
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "peers.sh: installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
rust_ok || { echo "peers.sh: need cargo with rustc >= 1.80 (safetensors 0.6.2's rust-version)" >&2; exit 1; }

# --- Run:ai: its C++ core into libstreamer.so, no Bazel --------------------------------------
# Every non-test source of cpp/streamer, cpp/common and cpp/utils. None needs an SDK: the S3
# code there (streamer/impl/s3, common/s3_wrapper) only dlopen()s libstreamers3.so, which is
# not built (cpp/s3, cpp/gcs, cpp/azure need the AWS / Google / Azure SDKs; local files only).
# Flags as Bazel's `-c opt` with the repo's .bazelrc (C++17, PIC) and rules.bzl; the exported
# symbols from streamer.ldscript. Not built: cpp/cc/portability's memcpy/__fdelt_chk wrappers
# (old-glibc compatibility for their wheels, not used by a native build).
RB="$BUILD/runai"; mkdir -p "$RB/obj"
if [ "$(cat "$RB/COMMIT" 2>/dev/null)" != "$RUNAI_COMMIT" ]; then rm -rf "$RB/obj"/*.o "$RB/libstreamer.so"; fi
export RB RUNAI RUNAI_CXXFLAGS="-std=c++17 -O2 -DNDEBUG -fPIC -ffunction-sections -fdata-sections -D_RUNAI_STREAMER_SO -I$RUNAI/cpp"
compile() {  # $1: a source under cpp/; skipped while its object is newer
  local obj="$RB/obj/$(echo "${1%.cc}" | tr / _).o"
  [ "$obj" -nt "$RUNAI/cpp/$1" ] || nice -n 15 g++ $RUNAI_CXXFLAGS -c "$RUNAI/cpp/$1" -o "$obj"
}
export -f compile
mapfile -t SRCS < <(cd "$RUNAI/cpp" && find streamer common utils -name '*.cc' ! -name '*_test*.cc' | sort)
echo "peers.sh: Run:ai libstreamer.so (${#SRCS[@]} sources)"
printf '%s\n' "${SRCS[@]}" | xargs -P "$JOBS" -n 1 bash -c 'compile "$0"'
nice -n 15 g++ -shared -o "$RB/libstreamer.so" "$RB"/obj/*.o -Wl,--gc-sections -Wl,--no-undefined \
  -Wl,--version-script="$RUNAI/cpp/streamer/streamer.ldscript" -lpthread -ldl
echo "$RUNAI_COMMIT" > "$RB/COMMIT"
nice -n 15 g++ -std=c++17 -O2 -I"$RUNAI/cpp" -o "$BUILD/runai_harness" "$ROOT/bench/peers/runai_harness.cc" \
  -L"$RB" -lstreamer -Wl,-rpath,"$RB" -lpthread

# --- HF safetensors: our harness crate, depending on the unpacked crate by path ---------------
# Built in a copy under BUILD (cargo writes Cargo.lock beside the manifest); the copy's
# `safetensors` link is the path dependency its Cargo.toml names.
HB="$BUILD/safetensors_harness"; mkdir -p "$HB"
cp -f "$ROOT/bench/peers/safetensors_harness/Cargo.toml" "$HB/"
rm -rf "$HB/src"; cp -r "$ROOT/bench/peers/safetensors_harness/src" "$HB/src"
ln -sfn "$HF/safetensors" "$HB/safetensors"
echo "peers.sh: safetensors harness (cargo --offline against /usr/share/cargo/registry)"
nice -n 15 cargo build --release --offline -j "$JOBS" --manifest-path "$HB/Cargo.toml" \
  --config 'source.crates-io.replace-with="debian"' \
  --config 'source.debian.directory="/usr/share/cargo/registry"'
cp -f "$HB/target/release/safetensors_harness" "$BUILD/safetensors_harness_bin"

[ "$BUILD_ONLY" -eq 1 ] && { echo "peers.sh: built in $BUILD"; exit 0; }
exec /usr/bin/python3 "$ROOT/bench/peers/compare.py" --peers-build "$BUILD" "${PASS[@]}"
