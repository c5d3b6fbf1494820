#!/usr/bin/env bash
# Builds what measure.sh runs, so that the measuring can happen on another
# machine, one with no Go toolchain and no checkout:
#
#   dev/benchmarks/build.sh BIN_DIR
#
# BIN_DIR gets benchmarks.test (this package's test binary), core.test (the
# core package's, from the repository root), tables (cmd/tables), and
# build.txt, which says what they were built from. GOOS and GOARCH build
# for another platform, as for any go command.
set -euo pipefail
[ $# = 1 ] || { echo "usage: $0 BIN_DIR" >&2; exit 2; }
mkdir -p "$1"
bin=$(cd "$1" && pwd)
cd "$(dirname "$0")"

echo "== building into $bin ($(date +%T))"
go test -c -o "$bin/benchmarks.test" .
(cd ../.. && go test -c -o "$bin/core.test" .)
go build -o "$bin/tables" ./cmd/tables

commit=$(git rev-parse --short HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then commit+=" with uncommitted changes"; fi
echo "$(go env GOVERSION) $(go env GOOS)/$(go env GOARCH), commit $commit" > "$bin/build.txt"
cat "$bin/build.txt"
