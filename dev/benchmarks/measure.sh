#!/usr/bin/env bash
# Runs the binaries build.sh made and writes their raw outputs, for
# report.sh; it needs neither Go nor a checkout, only BIN_DIR:
#
#   dev/benchmarks/measure.sh BIN_DIR OUT_DIR
#
# OUT_DIR gets the benchmark text of each part measured (allow.txt,
# http.txt, floor.txt, core.txt), cmd/tables' markdown (tables.md), and
# run.txt, the line that RESULTS.md's sections quote to say which run
# measured them. Raw outputs of parts left out are removed from OUT_DIR, so
# that report.sh never takes an older run's for this one's.
#
# COUNT, CPU and BENCHTIME (5, "1,2", 200ms) are go test's -count, -cpu and
# -benchtime. PARTS (default "allow http floor core tables") picks parts:
# allow is the throughput of every limiter (the long one), http the
# middleware, floor the cost of a clock read, a hash and a lock (it needs
# allow in the same run), core the core package's own benchmarks, tables
# cmd/tables' sections, TABLES of them (default "accuracy,memory,latency").
set -euo pipefail
[ $# = 2 ] || { echo "usage: $0 BIN_DIR OUT_DIR" >&2; exit 2; }
bin=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)

COUNT=${COUNT:-5}
CPU=${CPU:-1,2}
BENCHTIME=${BENCHTIME:-200ms}
PARTS=${PARTS:-allow http floor core tables}
TABLES=${TABLES:-accuracy,memory,latency}
flags=(-test.run '^$' -test.benchmem -test.count "$COUNT" -test.benchtime "$BENCHTIME")

for part in $PARTS; do
  case $part in
  allow | http | floor | core | tables) ;;
  *) echo "measure.sh: unknown part $part in PARTS (want allow, http, floor, core, tables)" >&2; exit 2 ;;
  esac
done
[[ " $PARTS " != *" floor "* || " $PARTS " == *" allow "* ]] ||
  { echo "measure.sh: the floor is set against keyrate's Allow: PARTS with floor needs allow" >&2; exit 2; }

cd "$out"
rm -f allow.txt http.txt floor.txt core.txt tables.md run.txt ./*.csv ./*.benchstat.txt
benchmarks=()
for part in $PARTS; do
  case $part in
  allow)
    echo "== throughput: every limiter, every workload, -cpu $CPU -count $COUNT ($(date +%T))"
    "$bin/benchmarks.test" "${flags[@]}" -test.cpu "$CPU" -test.bench '^BenchmarkAllow$' -test.timeout 90m | tee allow.txt ;;
  http)
    echo "== HTTP middleware, -cpu $CPU -count $COUNT ($(date +%T))"
    "$bin/benchmarks.test" "${flags[@]}" -test.cpu "$CPU" -test.bench '^BenchmarkHTTP$' -test.timeout 30m | tee http.txt ;;
  floor)
    echo "== floor ($(date +%T))"
    "$bin/benchmarks.test" "${flags[@]}" -test.cpu 1 -test.bench '^BenchmarkFloor$' -test.timeout 30m | tee floor.txt ;;
  core)
    echo "== the core's own benchmarks: one policy and two ($(date +%T))"
    "$bin/core.test" "${flags[@]}" -test.cpu 1 -test.bench '^Benchmark(Allow|Take|AllowPolicies|TakePolicies)$' -test.timeout 30m | tee core.txt ;;
  tables)
    echo "== cmd/tables: $TABLES ($(date +%T))"
    "$bin/tables" -sections "$TABLES" | tee tables.md ;;
  esac
  [ "$part" = tables ] || benchmarks+=("$part")
done

settings="tables: $TABLES"
if [ ${#benchmarks[@]} -gt 0 ]; then
  settings="${benchmarks[*]}: COUNT=$COUNT CPU=$CPU BENCHTIME=$BENCHTIME"
  [[ " $PARTS " != *" tables "* ]] || settings+="; tables: $TABLES"
fi
model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)
echo "dev/benchmarks/measure.sh ($settings), $(cat "$bin/build.txt"), $(nproc) CPUs${model:+ ($model)}, $(date -u +%Y-%m-%d)" > run.txt
echo "== raw outputs in $out: $(cat run.txt)"
