#!/bin/bash
# Runs every built fuzzer for a bounded time on a seed corpus made, at run time, from the shared
# interop test data; fails on any crash, leak, sanitizer report or timeout.
#
#   fuzz/run_fuzzers.sh BUILD_DIR SECONDS_PER_TARGET
#
# WMAP_FUZZ_JOBS=N fuzzers run at once (default: the CPU count), each for the full time.
# BUILD_DIR was configured with CC=clang CXX=clang++ -DWMAP_BUILD_FUZZERS=ON and built
# (`ninja -C BUILD_DIR wmap_fuzzers wmap_cli`); this script configures and builds nothing.
# Reproducers land in BUILD_DIR/fuzz-artifacts/; the grown corpora in BUILD_DIR/fuzz-corpus/.
set -euo pipefail

if [[ $# -ne 2 || ! "$2" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 BUILD_DIR SECONDS_PER_TARGET" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
seconds=$2
src=$(cd "$(dirname "$0")/.." && pwd)
testdata=${WMAP_TESTDATA_DIR:-$src/tests/data}
python=/usr/bin/python3

for f in safetensors_header_fuzzer shard_index_fuzzer catalog_json_fuzzer model_config_fuzzer mapping_fuzzer torch_pickle_fuzzer \
  s3_listing_fuzzer; do
  [[ -x $build/fuzz/$f ]] || { echo "$0: $build/fuzz/$f is not built (ninja -C $build wmap_fuzzers)" >&2; exit 2; }
done
[[ -d $testdata/interop ]] || { echo "$0: no test data at $testdata (set WMAP_TESTDATA_DIR)" >&2; exit 2; }

seeds=$(mktemp -d)
trap 'rm -rf "$seeds"' EXIT
mkdir -p "$seeds"/{header,index,catalog,config,mapping,torch,listing} "$build/fuzz-artifacts"

# Header seeds: every interop .safetensors file (valid and invalid) and the format's own vectors.
i=0
while IFS= read -r -d '' f; do
  cp "$f" "$seeds/header/$((i++))-$(basename "$f")"
done < <(find "$testdata/interop" -name '*.safetensors' -size -1000k -print0)
"$python" - "$testdata/interop/format_vectors.json" "$seeds/header" <<'PY'
import json, os, sys
doc = json.load(open(sys.argv[1]))
items = doc if isinstance(doc, list) else doc.get("vectors", doc)
if isinstance(items, dict):
    items = [dict(v, name=k) if isinstance(v, dict) else {"name": k, "hex": v} for k, v in items.items()]
for n, v in enumerate(items):
    hexdata = next((v[k] for k in ("hex", "bytes", "data", "input") if isinstance(v.get(k), str)), None)
    if hexdata is not None:
        open(os.path.join(sys.argv[2], f"vector-{n}"), "wb").write(bytes.fromhex(hexdata))
PY

# Index seeds: the interop sharded index and the real layouts' index files under 256 KiB.
while IFS= read -r -d '' f; do
  cp "$f" "$seeds/index/$((i++))-index.json"
done < <(find "$testdata" -name 'model.safetensors.index.json' -size -256k -print0)

# Config seeds: every config.json of the shared test data (real layouts) and of the interop set.
while IFS= read -r -d '' f; do
  cp "$f" "$seeds/config/$((i++))-config.json"
done < <(find "$testdata" -name 'config.json' -size -256k -print0)

# Mapping seeds: the mapping files shipped with wmap, and the YAML fixtures of the tests.
while IFS= read -r -d '' f; do
  cp "$f" "$seeds/mapping/$((i++))-$(basename "$f")"
done < <(find "$src/mappings" "$src/tests" -name '*.yaml' -size -64k -print0)

# Torch seeds: small torch.save checkpoints (whole .bin files, and their data.pkl alone), made by
# Debian's python3-torch when it is installed; otherwise the fuzzer starts from an empty corpus.
"$python" - "$seeds/torch" <<'PY' || echo "$0: warning: no torch; torch_pickle_fuzzer starts from an empty corpus" >&2
import os, sys, zipfile
import torch
out = sys.argv[1]
base = torch.arange(12, dtype=torch.float32)
cases = {
    "linear": torch.nn.Linear(3, 2).state_dict(),
    "dtypes": {"bf16": torch.ones(2, 3, dtype=torch.bfloat16), "f16": torch.zeros(4, dtype=torch.float16),
               "i64": torch.arange(5), "u8": torch.ones(3, dtype=torch.uint8), "b": torch.ones(2, dtype=torch.bool)},
    "views": {"a": base[2:5], "b": base[4:8].view(2, 2), "tied": base, "tied2": base},
}
for name, sd in cases.items():
    path = os.path.join(out, name + ".bin")
    torch.save(sd, path)
    z = zipfile.ZipFile(path)
    pkl = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
    open(os.path.join(out, name + ".pkl"), "wb").write(z.read(pkl))
PY

# Listing seeds: ListObjectsV2 pages as S3 writes them (a truncated page with a token, the last
# page with a folder and an escaped key).
cat >"$seeds/listing/page1.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>models</Name><Prefix>models/llama/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys><Delimiter>/</Delimiter><IsTruncated>true</IsTruncated><Contents><Key>models/llama/config.json</Key><LastModified>2026-12-01T00:00:00.000Z</LastModified><ETag>&quot;1b2cf535f27731c974343645a3985328&quot;</ETag><Size>367</Size><StorageClass>STANDARD</StorageClass></Contents><Contents><Key>models/llama/model-00001-of-00002.safetensors</Key><ETag>"9b2cf535f27731c974343645a3985328-12"</ETag><Size>265308064</Size></Contents><NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken></ListBucketResult>
XML
cat >"$seeds/listing/page2.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult><Name>models</Name><Prefix>models/llama/</Prefix><IsTruncated>false</IsTruncated><Contents><Key>models/llama/a &amp; b.safetensors</Key><ETag>"x"</ETag><Size>0</Size></Contents><CommonPrefixes><Prefix>models/llama/sub/</Prefix></CommonPrefixes></ListBucketResult>
XML

# Catalog seeds: catalogs saved by a wmap CLI (WMAP_SEED_CLI, else this build's) from the valid
# interop checkpoints. tools/test.sh passes the main build's: the catalog format is the same, and
# the fuzz build then compiles only the parsers' stages.
seed_cli=${WMAP_SEED_CLI:-$build/bin/wmap}
if [[ -x $seed_cli ]]; then
  for d in "$testdata"/interop/valid/*/ "$testdata"/interop/valid/*/*.safetensors; do
    "$seed_cli" -q inspect "$d" --save-catalog "$seeds/catalog/$((i++)).json" >/dev/null 2>&1 || true
  done
else
  echo "$0: warning: $seed_cli not built; catalog_json_fuzzer starts from an empty corpus" >&2
fi
echo "seeds: $(ls "$seeds/header" | wc -l) headers, $(ls "$seeds/index" | wc -l) indexes, $(ls "$seeds/catalog" | wc -l) catalogs," \
  "$(ls "$seeds/config" | wc -l) configs, $(ls "$seeds/mapping" | wc -l) mappings, $(ls "$seeds/torch" | wc -l) torch," \
  "$(ls "$seeds/listing" | wc -l) listings"

# Each fuzzer is one single-threaded process: WMAP_FUZZ_JOBS (default: the CPU count) run at once,
# each for the full SECONDS, so the stage takes SECONDS x ceil(7 / jobs) instead of SECONDS x 7.
jobs=${WMAP_FUZZ_JOBS:-$(nproc)}
run() {  # fuzzer seed-folder: the fuzzer's verdict in $build/fuzz-artifacts/NAME.verdict
  local name=$1 corpus=$build/fuzz-corpus/$1 verdict=$build/fuzz-artifacts/$1.verdict
  mkdir -p "$corpus"
  rm -f "$verdict"
  if ! "$build/fuzz/$name" "$corpus" "$seeds/$2" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -use_value_profile=1 -print_final_stats=1 \
      -artifact_prefix="$build/fuzz-artifacts/$name-" >"$build/fuzz-artifacts/$name.log" 2>&1; then
    { echo "FAILED: $name (log: $build/fuzz-artifacts/$name.log)"
      grep -E 'ERROR|SUMMARY|Test unit written|runtime error|deadly signal' "$build/fuzz-artifacts/$name.log" | head -20 || true
    } >"$verdict"
    return 1
  fi
  { echo "== $name for ${seconds}s"
    grep -E '^stat::number_of_executed_units|^stat::new_units_added' "$build/fuzz-artifacts/$name.log" | tr '\n' ' '
    echo
  } >"$verdict"
}
status=0
names=()
for pair in safetensors_header_fuzzer:header shard_index_fuzzer:index catalog_json_fuzzer:catalog \
  model_config_fuzzer:config mapping_fuzzer:mapping torch_pickle_fuzzer:torch s3_listing_fuzzer:listing; do
  while (( $(jobs -rp | wc -l) >= jobs )); do wait -n || true; done
  run "${pair%%:*}" "${pair##*:}" &
  names+=("${pair%%:*}")
done
wait || true
# The verdict files, not wait's statuses (wait -n above may have reaped a job already).
for name in "${names[@]}"; do
  verdict=$build/fuzz-artifacts/$name.verdict
  if [[ ! -s $verdict ]]; then
    echo "FAILED: $name left no verdict (log: $build/fuzz-artifacts/$name.log)"
    status=1
  else
    cat "$verdict"
    if grep -q '^FAILED' "$verdict"; then status=1; fi
  fi
done
exit $status
