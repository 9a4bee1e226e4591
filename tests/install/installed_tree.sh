# The installed tree, as a user gets it: `cmake --install` into a temporary prefix, then
# examples/consumer (a C++-only project) configured and built against it with find_package(dtrain)
# and run, the
# pkg-config file compiling the same program, the installed dtrain finding its corpus under
# share/, and the Python tests against the installed module.
# Usage: installed_tree.sh BUILD_DIR SOURCE_DIR [PYTHON]
set -euo pipefail
build=$1
source=$2
python=${3:-}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
test -x "$prefix/bin/dtrain"
test -f "$prefix/include/dtrain/dtrain.h"
test -f "$prefix/include/dtrain/config.h"
test -f "$prefix/share/dtrain/corpus.txt"
libdir=$(dirname "$(find "$prefix" -name libdtrain_core.a | head -1)")
test -f "$libdir/cmake/dtrain/dtrainConfig.cmake"

# find_package(dtrain) and dtrain::dtrain.
cmake -S "$source/examples/consumer" -B "$prefix/consumer-build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer-build" >/dev/null
# The consumer is declared `project(dtrain_consumer LANGUAGES CXX)`: dtrain's package config
# (MPI included) must not need C, and the project must not have enabled it behind our back.
if grep -q '^CMAKE_C_COMPILER:' "$prefix/consumer-build/CMakeCache.txt"; then
  echo "examples/consumer enabled C: find_package(dtrain) is not tested for a C++-only project" >&2
  exit 1
fi
grep -q 'project(dtrain_consumer LANGUAGES CXX)' "$source/examples/consumer/CMakeLists.txt"
"$prefix/consumer-build/consumer" | tee "$prefix/consumer.out"
grep -q "all_reduce over 4 thread ranks correct" "$prefix/consumer.out"

# pkg-config, relocated: the .pc file finds the prefix from its own place.
PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --modversion dtrain
# shellcheck disable=SC2046
c++ -O1 -o "$prefix/consumer-pc" "$source/examples/consumer/main.cc" \
  $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs dtrain)
"$prefix/consumer-pc" >/dev/null

# The installed binary reads its corpus from share/dtrain, not from the source tree: run it from
# a copy of the prefix in another place (relocatable), with the source tree out of reach.
moved=$(mktemp -d)
cp -a "$prefix/bin" "$prefix/share" "$moved/"
"$moved/bin/dtrain" train --model tiny --steps 2 --eval-every 0 --json >"$prefix/train.json"
grep -q "share/dtrain/corpus.txt" "$prefix/train.json"
rm -rf "$moved"

if [ -n "$python" ]; then
  site=$(find "$prefix" -type d -path "*dist-packages" | head -1)
  PYTHONPATH="$site" DTRAIN="$prefix/bin/dtrain" "$python" -m pytest -q -p no:cacheprovider \
    "$source/tests/python"
fi
echo "installed tree: ok"
