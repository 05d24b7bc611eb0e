#!/bin/sh
# The complete first screen as a user sees it (issue #33): ../shared/bench/ptybench.py drives
# each program in a 120x40 PTY; first_frame_ms is the last screen change before 300 ms of
# quiet. Interleaved, N rounds of: the bare ratatui program (hello), then for each talaria
# binary a first-ever start (fresh TALARIA_HOME) and a later start (the same home again).
# One line per run, then the medians. Absolute paths (ptybench runs in a temp dir).
#
#   scripts/bench-first-screen.sh 7 /tmp/talaria-before "$PWD/target/quick-release/talaria"
#
# PTYBENCH_PY (default /var/tmp/ptyvenv/bin/python: a venv with pyte), HELLO (default
# /var/tmp/hello/release/hello, built from ../shared/bench/hello), PTYBENCH (the driver).
set -eu
N=$1; shift
PY=${PTYBENCH_PY:-/var/tmp/ptyvenv/bin/python}
root=$(cd "$(dirname "$0")/.." && pwd)
PB=${PTYBENCH:-$root/../shared/bench/ptybench.py}
[ -f "$PB" ] || PB=/work/shared/bench/ptybench.py
HELLO=${HELLO:-/var/tmp/hello/release/hello}
LOG=$(mktemp)
one() { # name out args...
    name=$1; out=$2; shift 2
    "$PY" "$PB" --name "$name" --out "$out" --settle 0.3 --idle 0.2 "$@" >/dev/null 2>&1 || true
    "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["first_byte_ms"], r["first_text_ms"], r["first_frame_ms"])' "$out/result.json" 2>/dev/null || echo "nan nan nan"
}
i=0
while [ "$i" -lt "$N" ]; do
    echo "hello - $(one hello "$(mktemp -d)" -- "$HELLO") load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$LOG"
    for b in "$@"; do
        home=$(mktemp -d)
        for start in first later; do
            echo "$b $start $(one talaria "$(mktemp -d)" --env TALARIA_HOME="$home" -- "$b") load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$LOG"
        done
    done
    i=$((i + 1))
done
echo "medians (first byte / first text / complete first screen, ms):"
"$PY" - "$LOG" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    runs.setdefault((f[0], f[1]), []).append([float(x) for x in f[2:5]])
for (name, start), rows in runs.items():
    rows = [r for r in rows if r[2] == r[2]]  # a run without a result is nan
    med = [statistics.median(col) for col in zip(*rows)] if rows else [float("nan")] * 3
    print(f"{name} {start}: " + " / ".join(f"{m:.1f}" for m in med) + f"  ({len(rows)} runs)")
PY
