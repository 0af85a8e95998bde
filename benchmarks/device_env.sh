# Sourced by the scripts that run robolearn on a lent device machine (table_16core.sh, robots_16core.sh),
# from the repository root: installs the carried wheels (.whl, git-ignored; the list and how to fetch
# them: table_16core.sh) and robolearn itself under /tmp, and puts them on PYTHONPATH (with LOCAL set, a
# quick check on this machine, it installs nothing: the venv has everything); defines machine_info and pack_runs.
if [ -z "${LOCAL:-}" ]; then
  python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/rl . >/dev/null 2>&1 || exit 1
  export PYTHONPATH=/tmp/rl:/tmp/site
  # imageio-ffmpeg (its wheel holds an ffmpeg binary, over the carry limit beside the others) is only used to
  # write videos, which no benchmark run does: an empty module stands in for it there
  if ! ${PY:-python3} -c "import imageio_ffmpeg" 2>/dev/null; then
    mkdir -p /tmp/shim/imageio_ffmpeg && echo '"""absent: no videos in this measurement"""' > /tmp/shim/imageio_ffmpeg/__init__.py
    export PYTHONPATH=$PYTHONPATH:/tmp/shim
  fi
fi

# What the measurement ran on, into $OUT/machine.txt. `nproc --all`: plain nproc honours OMP_NUM_THREADS=1,
# which these scripts set for every run, and would report one core.
machine_info() {
  { nproc --all; lscpu | grep -E "Model name|Thread|Core|Socket|MHz"
    ${PY:-python3} -c "import mujoco, torch, stable_baselines3 as s; print('mujoco', mujoco.__version__, 'torch', torch.__version__, 'sb3', s.__version__)"
  } | tee "$OUT/machine.txt"
}

# The runs' metrics, summaries, configs and logs under $WORK (no checkpoints: what the projections read)
# into $OUT/runs.tgz.
pack_runs() {
  (cd "$WORK" && find . -name metrics.csv -o -name summary.json -o -name runs.jsonl -o -name config.json -o -name "*.log" \
    | tar czf "$OUT/runs.tgz" -T -)
}
