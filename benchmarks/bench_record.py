"""Cost of recording observables over time (`record:`): the same sweep with and without them.

Run:  python benchmarks/bench_record.py            (a few minutes; one core)

For each model (stochastic transformer n = 8, d = 16; sphere flow n = 32, d = 16, symmetric
path), one cell, 200 trajectories, 20 checkpoints, T = 10, layers = 1000:

- kernel: CPU seconds of the kernel call alone (best of 3), record = () / ("states",) / every
  observable but states / all;
- store: CPU seconds of the whole partition in this process (kernel, write of every chunk, status)
  and the size of the store on disk (zarr's default compression), record = () / ("states",).

Threads: NUMBA_NUM_THREADS, OMP/OPENBLAS/MKL_NUM_THREADS are set to 1 before the imports.
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from tokensweep.kernels.vocabulary import RECORD_NAMES  # noqa: E402
from tokensweep.pipeline.execute import run_partition, simulate_partition  # noqa: E402
from tokensweep.pipeline.plan import Plan  # noqa: E402
from tokensweep.pipeline.spec.load import format_bytes, parse_sweep  # noqa: E402
from tokensweep.pipeline.store.lifecycle import prepare_store  # noqa: E402

SPECS = {
    "stochastic_transformer": {"grid": {"beta": 1.0, "d": 16, "n": 8}},
    "sphere_flow": {"grid": {"beta": 1.0, "d": 16, "n": 32}},
}
RECORDS = {"none": [], "states": ["states"],
           "all but states": [r for r in RECORD_NAMES if r != "states"], "all": list(RECORD_NAMES)}


def spec(model, record):
    return parse_sweep({"name": "bench", "model": model, **SPECS[model], "trajectories": 200,
                        "time": {"T": 10.0, "layers": 1000, "checkpoints": 20}, "seed": 1,
                        "record": record})


def cpu(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main():
    folder = Path(tempfile.mkdtemp(prefix="bench-record-"))
    print(f"{'model':24s} {'record':16s} {'kernel s':>9s} {'store s':>8s} {'store size':>11s}")
    for model in SPECS:
        for label, record in RECORDS.items():
            sweep = spec(model, record)
            part = Plan(sweep)[0]
            simulate_partition(sweep, part)  # compile
            kernel = cpu(lambda sweep=sweep, part=part: simulate_partition(sweep, part), 3)
            store, size = "", ""
            if label in ("none", "states"):
                path = folder / f"{model}-{label}.zarr"
                prepare_store(sweep, path)
                t = time.process_time()
                run_partition(sweep, path, 0)
                store = f"{time.process_time() - t:8.2f}"
                size = format_bytes(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()))
            print(f"{model:24s} {label:16s} {kernel:9.2f} {store:>8s} {size:>11s}", flush=True)
    shutil.rmtree(folder)


if __name__ == "__main__":
    main()
