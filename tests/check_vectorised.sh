#!/usr/bin/env bash
# make vec-check: every loop marked "// vectorised" in the element-wise code
# (models/gpt2_ops.c, device/optim.c, device/quantize.c) must be one GCC vectorises, for this
# machine's instruction set (-march=native) and for AVX2 alone (-march=haswell,
# a machine without AVX-512), read from GCC's own report (-fopt-info-vec). A
# loop the compiler leaves scalar runs several times slower on one of them
# without a word; this says which loop, on which.
#   CC=gcc FLAGS="the build's flags without -march" bash tests/check_vectorised.sh
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
CC=${CC:-gcc}
FILES="models/gpt2_ops.c device/optim.c device/quantize.c"
passed=0 failed=0
tmp=$(mktemp -d /tmp/shardlab_vec.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
if [ "$(uname -m)" != x86_64 ]; then
    echo "vec-check: the instruction sets named here are x86-64's; this is $(uname -m), nothing checked"
    echo "0 passed, 0 failed"
    exit 0
fi
for march in native haswell; do
    for file in $FILES; do
        report=$tmp/$(basename "$file").$march
        # shellcheck disable=SC2086  # FLAGS is a list of flags
        if ! $CC $FLAGS -march=$march -fopt-info-vec-optimized -c "$file" -o "$tmp/x.o" 2> "$report"; then
            echo "FAIL $file -march=$march: does not compile"; cat "$report"; failed=$((failed + 1)); continue
        fi
        # a loop is reported at its header's line, or (an OpenMP simd loop) at its body's, the next one
        missing=""
        for line in $(grep -n "// vectorised" "$file" | cut -d: -f1); do
            grep -q "^$file:\($line\|$((line + 1))\):[0-9]*: optimized: loop vectorized" "$report" ||
                missing="$missing $line"
        done
        count=$(grep -c "// vectorised" "$file")
        if [ -z "$missing" ]; then
            echo "ok   $file -march=$march: its $count loops marked vectorised are"; passed=$((passed + 1))
        else
            echo "FAIL $file -march=$march: left scalar, the loops at line(s)$missing"
            for line in $missing; do sed -n "${line}p" "$file"; done
            failed=$((failed + 1))
        fi
    done
done
echo "$passed passed, $failed failed"
[ $failed = 0 ]
