#!/usr/bin/env bash
# Turns the raw outputs of measure.sh into RESULTS.md, and copies its
# throughput and HTTP tables into README.md:
#
#   dev/benchmarks/report.sh OUT_DIR
#
# benchstat (golang.org/x/perf/cmd/benchstat, with go run) summarises each
# benchmark part found in OUT_DIR, next to it as text and CSV; cmd/results
# writes a section per part found, each naming the run in OUT_DIR/run.txt,
# and keeps the sections of RESULTS.md for the parts OUT_DIR lacks.
set -euo pipefail
[ $# = 1 ] || { echo "usage: $0 OUT_DIR" >&2; exit 2; }
out=$(cd "$1" && pwd)
cd "$(dirname "$0")"
[ -f "$out/run.txt" ] || { echo "report.sh: no run.txt in $out: not an output of measure.sh" >&2; exit 1; }
benchstat() { go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da "$@"; }

echo "== benchstat ($(date +%T))"
args=()
for part in allow http; do
  [ -f "$out/$part.txt" ] || continue
  benchstat -col /lib "$out/$part.txt" > "$out/$part.benchstat.txt"
  benchstat -col /lib -format csv "$out/$part.txt" > "$out/$part.csv" 2>/dev/null
  args+=("-$part" "$out/$part.csv")
done
if [ -f "$out/floor.txt" ]; then
  benchstat -format csv "$out/floor.txt" > "$out/floor.csv" 2>/dev/null
  args+=(-floor "$out/floor.csv")
fi
if [ -f "$out/core.txt" ]; then
  benchstat "$out/core.txt" > "$out/core.benchstat.txt"
  args+=(-core "$out/core.benchstat.txt")
fi
[ ! -f "$out/tables.md" ] || args+=(-tables "$out/tables.md")
run=$(cat "$out/run.txt")
count=$(sed -n 's/.*COUNT=\([0-9][0-9]*\).*/\1/p' "$out/run.txt")

[ ! -f RESULTS.md ] || args+=(-previous RESULTS.md)
go run ./cmd/results "${args[@]}" -run "$run" -count "${count:-1}" > RESULTS.md.new
mv RESULTS.md.new RESULTS.md
echo "== wrote dev/benchmarks/RESULTS.md ($(date +%T))"

# Copy RESULTS.md's throughput and HTTP tables (each section up to its
# first subsection), one heading level down, between README.md's markers.
awk '
  /<!-- results:begin -->/ {
    print
    while ((getline line < "RESULTS.md") > 0) {
      if (line ~ /^## (Throughput|HTTP)/) on = 1
      else if (line ~ /^##/) on = 0
      if (on) print (line ~ /^#/ ? "#" line : line)
    }
    skip = 1
    next
  }
  /<!-- results:end -->/ { skip = 0 }
  !skip
' README.md > README.md.new && mv README.md.new README.md
echo "== copied the throughput and HTTP tables into dev/benchmarks/README.md"
