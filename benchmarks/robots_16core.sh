#!/usr/bin/env bash
# Issue 17's 16-core target for the robot tasks' table (configs/benchmark/robots.yaml, sized for a 16-core
# machine): its own command, `robolearn benchmark run table=robots jobs=16`, run on the lent machine for
# BUDGET seconds and then interrupted (SIGINT: each run checkpoints, as an interrupted table does). A lease
# is shorter than the table (~45 min projected), so what comes back is each run's training curve so far:
# benchmarks/table_16core_project.py --table robots extrapolates every run to its budget and simulates the
# table's wall-clock at jobs=16. Runs that finish inside BUDGET come back whole (summary.json).
#   bash benchmarks/robots_16core.sh                     # on the device, carry .whl (see table_16core.sh)
#   LOCAL=1 BUDGET=40 JOBS=2 OUT=/tmp/o bash benchmarks/robots_16core.sh   # a quick local check
set -uo pipefail
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
PY=${PY:-python3}
BUDGET=${BUDGET:-400}
JOBS=${JOBS:-16}
WORK=${WORK:-/tmp/r16}
source benchmarks/device_env.sh  # the carried wheels and robolearn, unless LOCAL
mkdir -p "$OUT"
machine_info
rm -rf "$WORK"; mkdir -p "$WORK"
cd /tmp  # not the checkout: its robolearn/ has no configs/ (the installed package maps them in)
timeout -k 40 -s INT "$BUDGET" $PY -m robolearn.cli benchmark run table=robots out="$WORK/robots" jobs="$JOBS" \
  > "$WORK/benchmark.log" 2>&1 &
sleep 90; { date; uptime; } | tee -a "$OUT/machine.txt"
wait
sleep 3
pack_runs
tail -40 "$WORK/benchmark.log"
ls -la "$OUT"
