#!/usr/bin/env bash
# The GPU-machine quadruped recipe (configs/experiment/quadruped_flat_gpu.yaml) for a fixed
# wall-clock budget on a many-core machine, then the tracking figures of benchmarks/quadruped_flat.py.
# robolearn has no GPU physics backend yet (issue 15), so this runs MuJoCo's CPU batch and torch on
# the CPU cores. Written for this workplace's lent device machine (Python 3.12 with torch, no
# internet): run from the repository root with the wheels of mujoco, gymnasium, hydra-core and
# their missing dependencies in .whl/ (LOCAL=1 PY=<python> skips the install and uses an existing
# environment). Its results go to $OUT (metrics.csv, config.json, tracking.json).
#
#   BUDGET=300 OUT=/tmp/out bash benchmarks/quadruped_flat_device.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=16
REPO=$(pwd)
PY=${PY:-python3}
if [ -z "${LOCAL:-}" ]; then
  # imageio-ffmpeg's wheel (a bundled ffmpeg, 68 MB) is too large to carry; no video is written here.
  python3 -c "import imageio_ffmpeg" 2>/dev/null || { mkdir -p /tmp/site/imageio_ffmpeg \
    && echo 'def get_ffmpeg_exe():  raise RuntimeError("no ffmpeg on this machine")' > /tmp/site/imageio_ffmpeg/__init__.py; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/rl . >/dev/null 2>&1 || exit 1
  export PYTHONPATH=/tmp/rl:/tmp/site
fi
nproc; $PY -c "import mujoco, torch; print('mujoco', mujoco.__version__, 'torch', torch.__version__)"
cd /tmp
BUDGET=${BUDGET:-330}
start=$(date +%s)
timeout -s INT "$BUDGET" $PY -m robolearn.cli.main train experiment=quadruped_flat_gpu run_dir=/tmp/qf \
  runner.eval_interval=10 runner.checkpoint_interval=5 torch_threads=16 runner.console=false ${EXTRA:-} 2>&1 | tail -15
echo "train wall $(( $(date +%s) - start )) s"
cp /tmp/qf/metrics.csv /tmp/qf/config.json "$OUT"/ 2>/dev/null
$PY - <<PY
import json, sys, time
sys.path.insert(0, "$REPO/benchmarks")
from pathlib import Path
from quadruped_flat import tracking
t = time.time()
res = {"trained": tracking(Path("/tmp/qf"), 4242), "zero_action": tracking(None, 4242)}
print(json.dumps(res, indent=1), "eval", round(time.time() - t, 1), "s")
Path("$OUT/tracking.json").write_text(json.dumps(res, indent=1))
PY
