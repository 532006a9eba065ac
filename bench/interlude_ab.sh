#!/usr/bin/env bash
# kbench eval of one submission with the interlude and without it, in kbench's own workers:
#   bash bench/interlude_ab.sh submissions/qknorm quick
# "without" runs a copy of this tree in /tmp/kbench-no-interlude whose CallTimer never builds one
# (the protocol before 0baeb4f); the run is done as with, then with again, so the two "with" runs
# show the run-to-run spread. JSON and logs go to $OUT/interlude-{with-1,without,with-2}.*, and a
# per-case table of the submission's and baseline's medians to stdout.
set -o pipefail
source bench/gpu_env.sh || exit 1
SUB=${1:?submission directory}; SUITE=${2:-quick}
COPY=/tmp/kbench-no-interlude
rm -rf "$COPY" && cp -r . "$COPY" || exit 1
sed -i 's/self.interlude = Interlude(device)/self.interlude = None/' "$COPY/kbench/call_timer.py"
grep -q "self.interlude = Interlude(device)" "$COPY/kbench/call_timer.py" && { echo "the copy still builds an interlude"; exit 1; }
run() { python3 -m kbench eval "$SUB" --suite "$SUITE" -q --json "$OUT/interlude-$1.json" > "$OUT/interlude-$1.log" 2>&1; }
run with-1 || exit 1
(cd "$COPY" && export PYTHONPATH="/tmp/site:$COPY" && run without) || exit 1
run with-2 || exit 1
python3 - "$OUT" <<'PY'
import json, sys
runs = {name: json.load(open(f"{sys.argv[1]}/interlude-{name}.json")) for name in ("with-1", "without", "with-2")}
print(f"{'case':24s}" + "".join(f"{name + ' sub':>14s}{name + ' base':>15s}" for name in runs))
for i, case in enumerate(runs["with-1"]["cases"]):
    cells = []
    for r in runs.values():
        c = r["cases"][i]
        base = c.get("baseline_latency_ms")
        cells.append(f"{c['latency_ms'] * 1e3:11.2f} us{(base or 0) * 1e3:12.2f} us")
    print(f"{case['case']:24s}" + "".join(cells))
PY
