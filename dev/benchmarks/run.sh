#!/usr/bin/env bash
# Runs every side-by-side benchmark and measurement and writes RESULTS.md:
# build.sh, measure.sh and report.sh in turn, on this machine.
#
#   dev/benchmarks/run.sh        # over 10 minutes on 2 cores
#
# The binaries go to dev/benchmarks/results/bin/, the raw outputs
# (benchmark text, benchstat text and CSV) to dev/benchmarks/results/raw/;
# git ignores both. COUNT, CPU, BENCHTIME, PARTS and TABLES go to measure.sh
# (see there) for a quicker look or a part of the run; RESULTS.md is only
# meant to be committed from their defaults.
set -euo pipefail
cd "$(dirname "$0")"
./build.sh results/bin
./measure.sh results/bin results/raw
./report.sh results/raw
