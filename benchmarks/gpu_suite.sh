#!/usr/bin/env bash
# The GPU benchmarks of issue 15 in one command, on a CUDA machine (an H100/H200 with 16 cores):
#   1. gpu_env_throughput.py    env steps/s, N = 1,024 ... 16,384, vs the CPU batch and the anchors
#   2. gpu_ppo_vs_rslrl.py      PPO env steps/s incl. learning vs rsl-rl-lib (goal >= 1.5x)
#   3. gpu_sac_vs_sb3.py        SAC gradient steps/s vs Stable-Baselines3 (goal >= 3x)
#   4. gpu_time_to_threshold.py PPO wall-clock to a return threshold, 4,096 GPU worlds vs the CPU path
#   5. update_compile.py        eager vs torch.compile / CUDA-graph PPO and SAC updates (step "compile")
#   6. pytest -m gpu tests/test_gpu.py (the no-host-sync check of a training iteration), if present
# Run from the repository root. Each step's table goes to $OUT/<step>.md, its progress to
# $OUT/<step>.log, its measurements to $OUT/<step>.json; $OUT/results.md gathers the tables and
# the exit status of every step. A failing step is recorded and the suite goes on.
#
#   bash benchmarks/gpu_suite.sh                     # everything: up to ~100 min (TTT_MINUTES=2: ~45 min)
#   ONLY="sac gputest" bash benchmarks/gpu_suite.sh  # some steps (these two need no Warp)
#   QUICK=1 LOCAL=1 PY=.venv/bin/python bash benchmarks/gpu_suite.sh  # CPU smoke run of the whole suite
#
# Environment: OUT (results folder; default gpu_results/<time>), PY (python), DEVICE (cuda),
# BACKEND (warp), ONLY (steps among: throughput ppo sac ttt compile gputest), QUICK (tiny CPU sizes, and
# DEVICE=cpu BACKEND=mujoco unless set), LOCAL (use $PY's environment as it is, install nothing),
# TTT_MINUTES (time cap per time-to-threshold run, default 5), ROBOLEARN_COMMIT (recorded when the
# tree has no .git), EXTRA_<STEP> (more arguments for one step, e.g. EXTRA_PPO="--set schedule=fixed").
#
# Installing what is missing (unless LOCAL is set): on this workplace's lent device machine (Python
# 3.12 with torch, no internet) from the wheels carried in .whl/ (as benchmarks/quadruped_flat_device.sh
# does: mujoco, gymnasium, hydra, rsl-rl-lib, tensordict, stable-baselines3, pytest and their small
# dependencies); elsewhere with pip from the index. warp-lang's wheel (about 150 MB) is too large to
# carry: without network, BACKEND=warp needs it installed already.
set -uo pipefail
export PYTHONUNBUFFERED=1 GIT_PYTHON_REFRESH=quiet
REPO=$(pwd)
PY=${PY:-python3}
if [ -n "${QUICK:-}" ]; then
  DEVICE=${DEVICE:-cpu}; BACKEND=${BACKEND:-mujoco}; Q=--quick
else
  DEVICE=${DEVICE:-cuda}; BACKEND=${BACKEND:-warp}; Q=
fi
ONLY=${ONLY:-throughput ppo sac ttt compile gputest}
OUT=${OUT:-$REPO/gpu_results/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(getconf _NPROCESSORS_ONLN)}
export ROBOLEARN_COMMIT=${ROBOLEARN_COMMIT:-$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)}

has() { case " $ONLY " in *" $1 "*) return 0;; esac; return 1; }  # is step $1 asked for?
# Only what the asked steps import: SAC alone (no env stepped) runs without Warp, for instance.
need="robolearn mujoco gymnasium"
has ppo && need="$need tensordict rsl_rl"
has sac && need="$need stable_baselines3"
has gputest && [ -f "$REPO/tests/test_gpu.py" ] && need="$need pytest"
if [ "$BACKEND" = warp ] && { has throughput || has ppo || has ttt; }; then need="$need warp mujoco_warp"; fi
missing() {  # the modules of "$@" that $PY cannot find
  (cd /tmp && $PY - "$@" <<'PY'
import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))
PY
  )
}

if [ -z "${LOCAL:-}" ] && [ -n "$(missing $need)" ]; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    echo "installing from the carried wheels in .whl/ into /tmp/site, robolearn into /tmp/rl"
    # imageio-ffmpeg's wheel (a bundled ffmpeg, 68 MB) is not carried either; no video is written here.
    $PY -c "import imageio_ffmpeg" 2>/dev/null || { mkdir -p /tmp/site/imageio_ffmpeg \
      && echo 'def get_ffmpeg_exe():  raise RuntimeError("no ffmpeg on this machine")' > /tmp/site/imageio_ffmpeg/__init__.py; }
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
    $PY -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/rl . >/dev/null 2>&1 || exit 1
    export PYTHONPATH=/tmp/rl:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  if [ -n "$(missing $need)" ]; then
    echo "installing from the package index: robolearn, rsl-rl-lib, stable-baselines3, mujoco-warp, pytest"
    $PY -m pip install -q -e "$REPO" "rsl-rl-lib==5.5.1" "stable-baselines3>=2.3" "pytest>=8" \
      "mujoco-warp>=4.0,<5" || echo "pip install failed: continuing with what is installed"
  fi
fi
gone=$(missing $need)
if [ -n "$gone" ]; then
  echo "missing Python modules: $gone"
  case " $gone " in *" warp "*|*" mujoco_warp "*)
    echo "  BACKEND=warp needs mujoco-warp (pip install 'mujoco-warp>=4.0,<5'); BACKEND=mujoco times the CPU batch";;
  esac
  exit 2
fi
case "$DEVICE" in cuda*)
  (cd /tmp && $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)") || {
    echo "DEVICE=$DEVICE but torch.cuda.is_available() is False here; QUICK=1 runs the CPU smoke version"; exit 3; };;
esac

{
  echo "# GPU benchmarks (issue 15), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "commit $ROBOLEARN_COMMIT; DEVICE=$DEVICE BACKEND=$BACKEND ${QUICK:+QUICK=1 (a smoke run: no figures)}; $(getconf _NPROCESSORS_ONLN) cores"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    | sed 's/^/GPU: /'
} > "$OUT/results.md"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true

status=0
step() {  # step NAME CAP_SECONDS SCRIPT ARGS...: run one benchmark from /tmp (no source-tree shadowing)
  local name=$1 cap=$2 script=$3; shift 3
  has "$name" || return 0
  local extra_var="EXTRA_$(echo "$name" | tr '[:lower:]' '[:upper:]')"
  echo "== $name: $script $* ${!extra_var:-} (cap ${cap}s)"
  local t0=$(date +%s)
  (cd /tmp && timeout -s INT "$cap" $PY "$REPO/benchmarks/$script" --device "$DEVICE" --backend "$BACKEND" $Q \
     --json "$OUT/$name.json" "$@" ${!extra_var:-} > "$OUT/$name.md" 2> "$OUT/$name.log")
  local rc=$?
  [ $rc -ne 0 ] && status=1 && tail -5 "$OUT/$name.log"
  { echo; echo "## $name (exit $rc, $(( $(date +%s) - t0 )) s)"; cat "$OUT/$name.md"; } >> "$OUT/results.md"
  echo "   exit $rc, $(( $(date +%s) - t0 )) s"
}

TTT_MINUTES=${TTT_MINUTES:-5}
step throughput 1800 gpu_env_throughput.py
step ppo 1200 gpu_ppo_vs_rslrl.py
step sac 900 gpu_sac_vs_sb3.py
if [ -n "${QUICK:-}" ]; then
  step ttt 600 gpu_time_to_threshold.py
else
  # 2 tasks x 3 seeds x 2 paths, each capped at TTT_MINUTES of training (plus evaluations).
  step ttt $(( 12 * (TTT_MINUTES * 60 + 120) )) gpu_time_to_threshold.py --max-minutes "$TTT_MINUTES"
fi

if has compile; then
  # update_compile.py prints its own table and takes no --json/--quick: run it outside step().
  echo "== compile: update_compile.py --device $DEVICE --backend $BACKEND"
  t0=$(date +%s)
  envs=4096; rounds=9
  [ -n "${QUICK:-}" ] && envs=8 && rounds=1
  (cd /tmp && timeout -s INT 1200 $PY "$REPO/benchmarks/update_compile.py" --device "$DEVICE" --backend "$BACKEND" \
     --envs "$envs" --rounds "$rounds" > "$OUT/compile.md" 2> "$OUT/compile.log")
  rc=$?
  [ $rc -ne 0 ] && status=1 && tail -5 "$OUT/compile.log"
  { echo; echo "## compile (exit $rc, $(( $(date +%s) - t0 )) s)"; cat "$OUT/compile.md"; } >> "$OUT/results.md"
  echo "   exit $rc, $(( $(date +%s) - t0 )) s"
fi

if has gputest; then
  if [ -f "$REPO/tests/test_gpu.py" ]; then
    echo "== gputest: pytest -m gpu tests/test_gpu.py"
    (cd /tmp && timeout 900 $PY -m pytest -m gpu "$REPO/tests/test_gpu.py" --rootdir "$REPO" -c "$REPO/pyproject.toml" \
       -p no:cacheprovider -q -rs > "$OUT/gputest.log" 2>&1)
    rc=$?
    [ $rc -ne 0 ] && status=1
    { echo; echo "## gputest: pytest -m gpu tests/test_gpu.py (exit $rc)"; echo '```'; tail -15 "$OUT/gputest.log"; echo '```'; } \
      >> "$OUT/results.md"
    echo "   exit $rc"
  else
    echo "== gputest: tests/test_gpu.py not present, skipped" | tee -a "$OUT/results.md"
  fi
fi
echo "results: $OUT/results.md"
exit $status
