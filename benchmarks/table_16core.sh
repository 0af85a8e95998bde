#!/usr/bin/env bash
# Issue 17's 16-core target, measured inside a short device lease: the published table (configs/benchmark/
# table.yaml) cannot run whole in the minutes a lease gives, so this runs 16 of its runs at once, one per
# core and one thread each (what `robolearn benchmark run table=table jobs=16` does on that machine), for
# BUDGET seconds, and keeps their metrics. benchmarks/table_16core_project.py then turns the measured rates
# into each run's time on that machine (calibrated against the same runs' times in a finished table) and
# the table's projected wall-clock at jobs=16.
#
# Each slot is its own `benchmark run` over one (entry, library) and seeds 0,1,2, so a slot whose first run
# ends starts the next seed and the machine stays as loaded as the real table keeps it.
#   bash benchmarks/table_16core.sh                  # on the device: installs the carried wheels first
# The wheels travel in .whl (git-ignored; Python 3.12, manylinux x86-64): mujoco, mujoco-core, gymnasium,
# farama-notifications, cloudpickle, hydra-core, omegaconf, antlr4-python3-runtime, stable-baselines3; the
# device image has torch, numpy, h5py, opencv, matplotlib, tensorboard and tqdm. Fetch them with
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d .whl <name>==<version> ...
#   LOCAL=1 BUDGET=30 SLOTS=2 OUT=/tmp/o bash benchmarks/table_16core.sh   # a quick local check
set -uo pipefail
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
PY=${PY:-python3}
BUDGET=${BUDGET:-450}
WORK=${WORK:-/tmp/t16}
source benchmarks/device_env.sh  # the carried wheels and robolearn, unless LOCAL
# Calibration pairs first (their times on the finished table are known), then the pairs the table had not
# yet run when this was measured (their full-run time comes from the measured rate alone).
PAIRS=(
  halfcheetah_ppo:sb3_zoo hopper_ppo:sb3_zoo cartpole_swingup_ppo:sb3_default hopper_sac:sb3_default
  humanoid_ppo:robolearn hopper_sac:robolearn halfcheetah_ppo:robolearn
  walker2d_ppo:sb3_default walker2d_ppo:sb3_zoo ant_ppo:sb3_default ant_ppo:sb3_zoo
  humanoid_ppo:sb3_default humanoid_ppo:sb3_zoo halfcheetah_sac:sb3_default halfcheetah_sac:sb3_zoo
  walker2d_sac:sb3_default
)
SLOTS=${SLOTS:-${#PAIRS[@]}}
machine_info
rm -rf "$WORK"; mkdir -p "$WORK"
cd /tmp  # not the checkout: its robolearn/ has no configs/ (the installed package maps them in)
for ((i = 0; i < SLOTS; i++)); do
  IFS=: read -r entry lib <<< "${PAIRS[$i]}"
  timeout -k 30 -s INT "$BUDGET" $PY -m robolearn.cli benchmark run table=table out="$WORK/$entry.$lib" jobs=1 \
    entries="$entry" libs="$lib" seeds=0,1,2 > "$WORK/$entry.$lib.log" 2>&1 &
done
sleep 60; uptime | tee -a "$OUT/machine.txt"
wait
sleep 5
pack_runs
ls -la "$OUT"
