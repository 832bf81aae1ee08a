#!/usr/bin/env bash
# One prepared GPU session: the speed comparison of issue 7 with the jitted kernels on the
# GPU and the peers (NumPy reference, banditeval) on the same machine's CPU, and the
# CPU/GPU parity check of the identification kernels. Writes logs and JSON under $OUT.
#
# Run from the repository root on a machine with a CUDA jax (banditeval, pure Python,
# may travel as a wheel in .whl/):
#     OUT=/tmp/gpu bash benchmarks/experiments/gpu_run.sh
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_run}
mkdir -p "$OUT"
site=
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && site=:/tmp/site
fi
export PYTHONPATH=$PWD$site
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv || true
nproc
python3 -c "import jax, numpy, optax, equinox; print('jax', jax.__version__, jax.devices(), \
'numpy', numpy.__version__, 'optax', optax.__version__, 'equinox', equinox.__version__)"

speed() {  # name, then bench_speed.py arguments
  local name=$1; shift
  echo "=== speed $name: $*"
  timeout "${SPEED_TIMEOUT:-300}" python3 benchmarks/bench_speed.py "$@" \
    --np-reps 10 --be-reps 40 --be-reps-b1 5 --out "$OUT/speed_$name.json" \
    >"$OUT/speed_$name.log" 2>&1
  echo "rc $?"; tail -n 30 "$OUT/speed_$name.log"
}

speed k10_c4096 --K 10 --reps 16384 --chunk 4096 --rounds 3
echo "=== parity"
timeout 150 python3 benchmarks/experiments/gpu_parity.py run "$OUT/gpu_parity.npz" \
  >"$OUT/parity.log" 2>&1
echo "rc $?"; tail -n 14 "$OUT/parity.log"
speed k10_c16384 --K 10 --reps 65536 --chunk 16384 --rounds 3
speed k50_c4096 --K 50 --reps 16384 --chunk 4096 --rounds 2
