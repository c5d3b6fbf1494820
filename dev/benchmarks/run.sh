#!/usr/bin/env bash
# Runs every side-by-side benchmark and measurement and writes RESULTS.md.
#
#   dev/benchmarks/run.sh        # about 10 minutes on 2 cores
#
# Raw outputs (benchmark text, benchstat text and CSV, profiles) go to
# dev/benchmarks/results/raw/, which git ignores. COUNT, CPU and BENCHTIME
# override the defaults (5, "1,2", 200ms) for a quicker look; RESULTS.md
# is only meant to be committed from a default run.
set -euo pipefail
cd "$(dirname "$0")"

COUNT=${COUNT:-5}
CPU=${CPU:-1,2}
BENCHTIME=${BENCHTIME:-200ms}
BENCHSTAT="go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da"
RAW=results/raw
mkdir -p "$RAW"
flags=(-run '^$' -benchmem -count "$COUNT" -benchtime "$BENCHTIME")

echo "== throughput: every limiter, every workload, -cpu $CPU -count $COUNT ($(date +%T))"
go test "${flags[@]}" -cpu "$CPU" -bench '^BenchmarkAllow$' -timeout 60m . | tee "$RAW/allow.txt"

echo "== HTTP middleware, -cpu $CPU -count $COUNT ($(date +%T))"
go test "${flags[@]}" -cpu "$CPU" -bench '^BenchmarkHTTP$' -timeout 30m . | tee "$RAW/http.txt"

echo "== floor ($(date +%T))"
go test "${flags[@]}" -cpu 1 -bench '^BenchmarkFloor$' . | tee "$RAW/floor.txt"

echo "== the core's own benchmarks: one policy and two ($(date +%T))"
(cd ../.. && go test "${flags[@]}" -cpu 1 -bench '^Benchmark(Allow|Take|AllowPolicies|TakePolicies)$' .) | tee "$RAW/core.txt"

echo "== accuracy, memory, latency ($(date +%T))"
go run ./cmd/tables | tee "$RAW/tables.md"

echo "== benchstat ($(date +%T))"
$BENCHSTAT -col /lib "$RAW/allow.txt" > "$RAW/allow.benchstat.txt"
$BENCHSTAT -col /lib -format csv "$RAW/allow.txt" > "$RAW/allow.csv" 2>/dev/null
$BENCHSTAT -col /lib "$RAW/http.txt" > "$RAW/http.benchstat.txt"
$BENCHSTAT -col /lib -format csv "$RAW/http.txt" > "$RAW/http.csv" 2>/dev/null
$BENCHSTAT -format csv "$RAW/floor.txt" > "$RAW/floor.csv" 2>/dev/null

go run ./cmd/results -allow "$RAW/allow.csv" -http "$RAW/http.csv" -floor "$RAW/floor.csv" \
  -tables "$RAW/tables.md" -count "$COUNT" \
  -cmd "dev/benchmarks/run.sh (COUNT=$COUNT CPU=$CPU BENCHTIME=$BENCHTIME, $(go env GOVERSION), $(date -u +%Y-%m-%d))" \
  > RESULTS.md
$BENCHSTAT "$RAW/core.txt" > "$RAW/core.benchstat.txt"
{
  echo
  echo "## The core: one policy and two"
  echo
  echo "The core package's own benchmarks, run in the repository root with the flags above at"
  echo "\`-cpu 1\` (\`-bench '^Benchmark(Allow|Take|AllowPolicies|TakePolicies)\$'\`), benchstat"
  echo "medians. \`AllowPolicies\` and \`TakePolicies\` hold one hot key to two policies at once;"
  echo "compare them with the \`keys=1\` rows of \`Allow\` and with \`Take\`, one policy on one hot key."
  echo
  echo '```'
  cat "$RAW/core.benchstat.txt"
  echo '```'
} >> RESULTS.md
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
