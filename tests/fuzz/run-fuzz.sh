#!/bin/sh
# Runs each libFuzzer harness of tests/fuzz for a bounded time, seeded with its
# corpus, and prints one TAP point per target (for `make fuzz-check`).
#   run-fuzz.sh SRCDIR BUILDDIR SECONDS TARGET...
# Targets run side by side, one per CPU ($KS_FUZZ_JOBS to choose), so the whole
# step takes about SECONDS times the number of targets over the CPUs.
# A crash, a leak or a broken property fails the target's point; its input is
# kept as BUILDDIR/tests/fuzz/crashes/TARGET-* (add it to tests/fuzz/TARGET/
# once fixed). New inputs found go to a temporary corpus that is removed.
set -u
srcdir=$1 builddir=$2 seconds=$3
shift 3

# The config and state harnesses write a file per input: in memory where there is /dev/shm.
base=${TMPDIR:-/tmp}
[ -d /dev/shm ] && [ -w /dev/shm ] && base=/dev/shm
tmp=$(mktemp -d "$base/ks-fuzz-run-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
crashes=$builddir/tests/fuzz/crashes

# Writes the TAP line (and diagnostics) of target $1 to $tmp/$1/tap.
run_one() {
        t=$1 bin=$builddir/tests/fuzz/fuzz-$1 dict=$srcdir/tests/fuzz/json.dict out=$tmp/$1/tap
        case $t in config | contexts-d) dict=$srcdir/tests/fuzz/config.dict ;; esac
        mkdir -p "$tmp/$t/corpus" "$tmp/$t/scratch"
        if [ ! -x "$bin" ]; then
                echo "not ok - fuzz-$t: $bin is not built (make fuzz)" >"$out"
                return
        fi
        # Leaks count (ASan's LeakSanitizer); a single input may take 10 s and 2 GiB at most.
        KS_FUZZ_TMP=$tmp/$t/scratch "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
                -max_len=65536 -print_final_stats=1 -dict="$dict" -artifact_prefix="$tmp/$t/" \
                "$tmp/$t/corpus" "$srcdir/tests/fuzz/$t" >"$tmp/$t/log" 2>&1
        rc=$?
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$tmp/$t/log")
        cov=$(grep -o 'cov: [0-9]*' "$tmp/$t/log" | tail -1)
        if [ $rc -eq 0 ]; then
                echo "ok - fuzz-$t: ${runs:-?} inputs in ${seconds}s, ${cov:-cov: ?}, no crash, leak or broken property" >"$out"
                return
        fi
        {
                echo "not ok - fuzz-$t: libFuzzer exited $rc after ${runs:-?} inputs"
                mkdir -p "$crashes"
                for a in "$tmp/$t"/crash-* "$tmp/$t"/leak-* "$tmp/$t"/timeout-* "$tmp/$t"/oom-*; do
                        [ -f "$a" ] || continue
                        cp "$a" "$crashes/$t-${a##*/}"
                        echo "# input kept: $crashes/$t-${a##*/}"
                done
                grep -E 'ERROR|SUMMARY|property broken|runtime error|#[0-9]+ 0x[0-9a-f]+ in .*(src|tests/fuzz)/[^ ]+\.[ch]:[0-9]' "$tmp/$t/log" |
                        head -30 | sed 's/^/# /'
        } >"$out"
}

jobs=${KS_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
lane=0
while [ $lane -lt "$jobs" ]; do
        (
                i=0
                for t in "$@"; do
                        [ $((i % jobs)) -eq $lane ] && run_one "$t"
                        i=$((i + 1))
                done
        ) &
        lane=$((lane + 1))
done
wait

echo "1..$#"
for t in "$@"; do
        cat "$tmp/$t/tap" 2>/dev/null || echo "not ok - fuzz-$t: no result"
done
