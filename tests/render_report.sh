#!/usr/bin/env bash
# The report as a person sees it: RUN_DIR/report.html rendered by headless
# Chromium into OUT.png (a page 1100 pixels wide, tall enough for every picture),
# which must come out a real picture: a PNG of at least 100 KB. What it points at
# is checked by tests/check_plots.py (every image and link of the page is there).
#   bash tests/render_report.sh RUN_DIR OUT.png
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: render_report.sh RUN_DIR OUT.png" >&2; exit 2; }
run=$(cd "$1" && pwd) out=$2
browser=$(command -v chromium || true)
[ -n "$browser" ] || { echo "render_report: chromium is not installed (make deps installs it)" >&2; exit 1; }
[ -s "$run/report.html" ] || { echo "render_report: $run/report.html is not there" >&2; exit 1; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# as root Chromium needs --no-sandbox; the network flags keep it from reaching out of a closed machine
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$profile" \
    --hide-scrollbars --window-size=1100,12000 --screenshot="$out" "file://$run/report.html" >/dev/null 2>&1
[ -s "$out" ] || { echo "render_report: Chromium wrote no picture of $run/report.html" >&2; exit 1; }
size=$(stat -c %s "$out")
[ "$(head -c 8 "$out" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && [ "$size" -ge 100000 ] ||
    { echo "render_report: $out is not a picture of the report ($size bytes)" >&2; exit 1; }
echo "render_report: $out, $size bytes"
