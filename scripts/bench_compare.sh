#!/usr/bin/env bash
# Compares two octet binaries in one session (speeds are only comparable as ratios measured
# together, on a quiet machine): `bench latency` prefill and decode (one sequence) and `bench
# engine` decode throughput at 1 and 16 concurrent sequences, alternating the binaries for
# ROUNDS rounds; prints every run, then the best of each binary and new/old.
#   scripts/bench_compare.sh OLD_BINARY NEW_BINARY [MODEL] [ROUNDS]
set -euo pipefail
old="$1"; new="$2"
model="${3:-$HOME/.cache/octet/SmolLM2-135M-Instruct.Q4_1.gguf}"
rounds="${4:-3}"
export OMP_WAIT_POLICY=passive
log=$(mktemp)
for r in $(seq "$rounds"); do
  for which in old new; do
    bin=$([ "$which" = old ] && echo "$old" || echo "$new")
    lat=$("$bin" bench latency --model "$model" --json 2>/dev/null)
    eng=$("$bin" bench engine --model "$model" --concurrency 1,16 --contexts '' --json 2>/dev/null)
    echo "{\"binary\":\"$which\",\"round\":$r,\"latency\":$lat,\"engine\":$eng}" | tee -a "$log"
  done
done
python3 - "$log" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
def figs(r):
    f = {"prefill tok/s": r["latency"]["prefill_tokens_per_second"],
         "decode tok/s": r["latency"]["decode_tokens_per_second"]}
    for t in r["engine"]["throughput"]:
        f["engine c=%d tok/s" % t["concurrency"]] = t["decode_tokens_per_second"]
    return f
best = {}
for r in runs:
    for k, v in figs(r).items():
        best.setdefault(r["binary"], {})[k] = max(v, best.get(r["binary"], {}).get(k, 0))
print("%-18s %12s %12s %8s" % ("best of %d" % (len(runs) // 2), "old", "new", "new/old"))
for k in best["old"]:
    print("%-18s %12.1f %12.1f %8.3f" % (k, best["old"][k], best["new"][k],
                                          best["new"][k] / best["old"][k]))
PY
rm -f "$log"
