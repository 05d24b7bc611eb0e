#!/usr/bin/env bash
# Run every cargo-fuzz target (fuzz/fuzz_targets) for a bounded time each.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 60 s, every target)
#
# Needs `cargo install cargo-fuzz`. On a stable toolchain RUSTC_BOOTSTRAP=1 lets cargo-fuzz
# use the -Z flags it needs. No sanitizer by default (Rust code, and a build of the whole
# dependency tree with ASan is twice as slow); FUZZ_SANITIZER=address turns it on.
# Corpora stay in fuzz/corpus/<target>, crashes in fuzz/artifacts/<target>; every crash
# found becomes a regression test (see BENCHMARKS.md "Fuzzing"). Exits non-zero if a
# target found a crash.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${1:-60}"
shift || true
export RUSTC_BOOTSTRAP=1
sanitizer="${FUZZ_SANITIZER:-none}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list)
fi
cargo fuzz build --sanitizer "$sanitizer"
status=0
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    log="$(mktemp)"
    if cargo fuzz run --sanitizer "$sanitizer" "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
        result="ok"
    else
        result="CRASH (see fuzz/artifacts/$target)"
        status=1
    fi
    runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')"
    cov="$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)"
    echo "$target: $result, $runs executions in ${seconds}s, $cov, corpus $(ls "corpus/$target" | wc -l) inputs"
    [ "$result" = "ok" ] || tail -30 "$log"
    rm -f "$log"
done
exit "$status"
