#!/usr/bin/env bash
# One prepared GPU session, in stages named on the command line:
#   speed   issue 7's speed grid: bench_speed.py with the jitted kernels on the GPU and
#           the peers (NumPy reference, banditeval) on the same machine's CPU, three
#           widths (K = 10 at 4 096 and 16 384 replicates per call, K = 50 at 4 096)
#   parity  gpu_parity.py run: every policy's per-replicate answers, to compare with a
#           CPU run here (gpu_parity.py compare)
#   main    `jaxeval main --quick` twice: JAX's default matmul precision (TF32 on recent
#           NVIDIA GPUs) and JAX_DEFAULT_MATMUL_PRECISION=highest, to tell whether the
#           GPU's anchor figures move with the precision of its matrix products
# $OUT gets six files (the speed JSONs, the parity arrays, two summary tars); logs go to
# /tmp/gpu_logs and their ends to stdout.
#
# Run from the repository root on a machine with a CUDA jax (banditeval, pure Python,
# may travel as a wheel in .whl/), at most ten minutes a call, so one or two stages a
# call (on an H200: speed ~6 min with its compilations, parity ~1 min, main ~5 min):
#     OUT=/tmp/gpu bash benchmarks/experiments/gpu_run.sh speed parity
# The thirty-sixth session ran the first version (speed and parity only; the NumPy peer
# then had its BLAS threads at the default); the figures are in BUILD_NOTES.md "Speed on
# a GPU".
set -u
export PYTHONUNBUFFERED=1
stages=$*
for stage in $stages; do
  case $stage in speed|parity|main) ;; *) echo "unknown stage '$stage'"; stages=;; esac
done
if [ -z "$stages" ]; then
  echo "usage: OUT=DIR bash benchmarks/experiments/gpu_run.sh STAGE... (speed, parity, main)"
  exit 2
fi
OUT=${OUT:-/tmp/gpu_run}
LOGS=/tmp/gpu_logs
mkdir -p "$OUT" "$LOGS"
site=
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && site=:/tmp/site
fi
export PYTHONPATH=$PWD$site
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv || true
nproc --all
python3 -c "import jax, numpy, optax, equinox; print('jax', jax.__version__, jax.devices(), \
'numpy', numpy.__version__, 'optax', optax.__version__, 'equinox', equinox.__version__)"

speed() {  # name, then bench_speed.py arguments
  local name=$1; shift
  echo "=== speed $name: $*"
  # The peers are single-replicate loops of small arrays: one BLAS thread each, as on the
  # 2-core machine (torch is held to one thread by bench_speed.py itself).
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 timeout "${SPEED_TIMEOUT:-300}" python3 benchmarks/bench_speed.py "$@" \
    --np-reps 10 --be-reps 40 --be-reps-b1 5 --out "$OUT/speed_$name.json" \
    >"$LOGS/speed_$name.log" 2>&1
  echo "rc $?"; tail -n 30 "$LOGS/speed_$name.log"
}

main_quick() {  # name, then environment assignments
  local name=$1; shift
  echo "=== main --quick ($name)"
  rm -rf "/tmp/main_$name"
  env "$@" timeout 200 python3 -m jaxeval main --quick --quiet --out "/tmp/main_$name" \
    >"$LOGS/main_$name.log" 2>&1
  local rc=$?
  echo "rc $rc"; tail -n 30 "$LOGS/main_$name.log"
  if [ "$rc" -eq 0 ]; then  # no archive of a failed run
    tar -C "/tmp/main_$name" -cf "$OUT/main_$name.tar" \
      identification-quick/summary.json anchors-quick/summary.json
  fi
}

for stage in $stages; do
  case $stage in
    speed)
      speed k10_c4096 --K 10 --reps 16384 --chunk 4096 --rounds 3
      speed k10_c16384 --K 10 --reps 65536 --chunk 16384 --rounds 3
      speed k50_c4096 --K 50 --reps 16384 --chunk 4096 --rounds 2 ;;
    parity)
      echo "=== parity"
      timeout 150 python3 benchmarks/experiments/gpu_parity.py run "$OUT/gpu_parity.npz" \
        >"$LOGS/parity.log" 2>&1
      echo "rc $?"; tail -n 14 "$LOGS/parity.log" ;;
    main)
      main_quick default
      main_quick highest JAX_DEFAULT_MATMUL_PRECISION=highest ;;
  esac
done
