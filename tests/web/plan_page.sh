#!/usr/bin/env bash
# The planner's page (web/) in Debian's Chromium: builds it (scripts/web-build, the planner
# compiled to WebAssembly) and runs tests/web/plan_page_test.mjs against this build's dtrain.
# Exits 77 (CTest: skipped) with the reason when emscripten, chromium, node or the page's
# node_modules (npm ci in web/) are missing; scripts/setup installs them all.
#   tests/web/plan_page.sh path/to/dtrain [SCREENSHOT_DIR]
# SCREENSHOT_DIR defaults to web-screenshots/ beside the binary; docs/web/ holds the published ones.
set -euo pipefail
dtrain=${1:?usage: $0 path/to/dtrain [SCREENSHOT_DIR]}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
shots=${2:-$(dirname "$dtrain")/web-screenshots}
skip() {
  echo "skipped: $*"
  exit 77
}
command -v em++ >/dev/null || skip "emscripten is not installed (apt-get install emscripten; scripts/setup does)"
command -v node >/dev/null || skip "node is not installed"
chromium=${DTRAIN_CHROMIUM:-/usr/bin/chromium}
[ -x "$chromium" ] || skip "no chromium at $chromium (apt-get install chromium; scripts/setup does)"
[ -d "$root/web/node_modules/playwright-core" ] ||
  skip "web/node_modules has no playwright-core (run: npm ci --prefix web; scripts/setup does)"
start=$(date +%s)
"$root/scripts/web-build"
echo "build: $(($(date +%s) - start)) s"
DTRAIN_CHROMIUM=$chromium node "$root/tests/web/plan_page_test.mjs" \
  "${DTRAIN_WASM_BUILD_DIR:-$root/build-wasm}/site" "$dtrain" "$shots"
