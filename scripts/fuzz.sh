#!/usr/bin/env bash
# Builds every fuzz target (fuzz/Cargo.toml) with cargo-fuzz on nightly and runs each, one at a time, for SECONDS
# each (default 60), starting from the saved corpus fuzz/corpus/NAME (read only) and growing a
# working corpus in fuzz/work/NAME (git-ignored). Crashes land in fuzz/artifacts/NAME; fix the
# finding, then copy its input into fuzz/corpus/NAME so that `cargo test -p tensorlane-fuzz-targets`
# replays it on stable from then on.
#
#     scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Needs `rustup toolchain install nightly --profile minimal` and `cargo install cargo-fuzz`.
# Builds release with debug assertions (overflow checks) and no sanitizer: the parsers are safe
# Rust (`#![forbid(unsafe_code)]`), so panics, hangs, overflows and memory blow-ups are what is
# looked for, and an uninstrumented build runs several times more executions. FUZZ_FLAGS adds
# cargo-fuzz flags (e.g. FUZZ_FLAGS="-s address" for ASan); FUZZ_JOBS runs that many workers;
# FUZZ_ARGS is appended to every libFuzzer command line (e.g. FUZZ_ARGS="-max_len=4096" keeps
# mutants small; note that libFuzzer truncates longer corpus inputs to -max_len when it loads them).
# FUZZ_NO_BUILD=1 skips the build and runs the binaries of the last one.
# Prints one line per target: executions, coverage (libFuzzer's cov/ft) and corpus size.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^tensorlane-fuzz$')
fi
command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz is missing: cargo install cargo-fuzz" >&2; exit 1; }
flags=(-O -a -s none ${FUZZ_FLAGS:-})
# One build of every target (FUZZ_NO_BUILD=1 reuses the last one), then each binary in turn.
if [ -z "${FUZZ_NO_BUILD:-}" ]; then
    cargo +nightly fuzz build "${flags[@]}"
fi
bin="fuzz/target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release"
mkdir -p fuzz/work fuzz/artifacts
summary=()
status=0
for t in "${targets[@]}"; do
    mkdir -p "fuzz/work/$t" "fuzz/corpus/$t" "fuzz/artifacts/$t"
    log="fuzz/work/$t.log"
    echo "== $t (${secs}s)"
    if ! "$bin/$t" "fuzz/work/$t" "fuzz/corpus/$t" -artifact_prefix="fuzz/artifacts/$t/" \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        ${FUZZ_JOBS:+-jobs=$FUZZ_JOBS -workers=$FUZZ_JOBS} ${FUZZ_ARGS:-} >"$log" 2>&1; then
        echo "!! $t found something: see $log and fuzz/artifacts/$t" >&2
        tail -40 "$log" >&2
        status=1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    cov=$(echo "$last" | grep -o 'cov: [0-9]*' || true)
    ft=$(echo "$last" | grep -o 'ft: [0-9]*' || true)
    corp=$(echo "$last" | grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' || true)
    summary+=("$(printf '%-20s %12s execs  %-10s %-10s %s' "$t" "${execs:-?}" "$cov" "$ft" "$corp")")
done
echo
printf '%s\n' "${summary[@]}"
exit $status
