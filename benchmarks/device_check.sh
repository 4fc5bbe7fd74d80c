#!/usr/bin/env bash
# Issue 26's measurements on a machine with an NVIDIA GPU, as one run: the stochastic
# transformer's device kernel against one CPU core, with its statistics check, then the
# paper-scale onset table's probe and cells (bench_cuda.py); then the sphere flow's GPU path
# against the CPU kernel (bench_sphere_gpu.py), and with random weights, [GLPR-P] Fig. 5, and by RK4
# (bench_sphere_gpu_weights.py). Each script stops starting cases when its share of
# SECONDS has passed (compilation included) and lists the rest as skipped.
#
#   bash benchmarks/device_check.sh OUT_DIR [SECONDS]     # default 480: fits a 10-minute command
#   bash benchmarks/device_check.sh OUT_DIR --check       # no GPU: both scripts' check modes
#                                                         # (numba-cuda's simulator, torch's CPU)
#
# Needs numpy, scipy, numba, numba-cuda and torch only: tokensweep is imported from this checkout
# (its kernels need no zarr, Prefect or pydantic), not installed. Writes to OUT_DIR: gpu.txt
# (the card), cuda.json / cuda.md (bench_cuda.py), bench_sphere_gpu.json / .md,
# bench_sphere_gpu_weights.json / .md, and each script's log.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash benchmarks/device_check.sh OUT_DIR [SECONDS | --check]}
seconds=${2:-480}
mkdir -p "$out" /tmp/tokensweep-device-check
ln -sfn "$PWD" /tmp/tokensweep-device-check/tokensweep  # the checkout, importable as tokensweep
export PYTHONPATH=/tmp/tokensweep-device-check${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if [ "$seconds" = "--check" ]; then
    echo "no GPU: numba-cuda's simulator and torch's CPU device, tiny sizes" | tee "$out/gpu.txt"
    cuda_args=(--tiny) sphere_args=(--device cpu --quick --budget 120)
    weights_args=(--device cpu --quick --budget 60)
else
    { nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } \
        | tee "$out/gpu.txt"
    # part 1 of bench_cuda.py (12 sizes, compilation) takes what its --budget (part 2's cells)
    # leaves of its share; the sphere flow's cases stop at their own --budget
    cuda_args=(--budget $((seconds * 3 / 10))) sphere_args=(--budget $((seconds * 7 / 20)))
    weights_args=(--budget $((seconds / 8)))
fi
status=0
python3 benchmarks/bench_cuda.py "${cuda_args[@]}" --json "$out/cuda.json" 2>&1 \
    | tee "$out/cuda.md" || status=1
python3 benchmarks/bench_sphere_gpu.py "${sphere_args[@]}" --out "$out" 2>&1 \
    | tee "$out/bench_sphere_gpu.log" || status=1
python3 benchmarks/bench_sphere_gpu_weights.py "${weights_args[@]}" --out "$out" 2>&1 \
    | tee "$out/bench_sphere_gpu_weights.log" || status=1
exit $status
