"""Time to write a report, by the PNG compression of its figures (pipeline/report/figures.py).

Run:  python benchmarks/bench_report.py [--entry quickstart] [--repeats 3]

Runs the catalog entry (small scale) through the real pipeline in this process, then writes its
report `repeats` times with each zlib level, alternating: Pillow's default (6) and the report's
(`figures.PNG`). Prints the median seconds per report, the figures' total bytes and whether the
pixels of every figure are the same.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import matplotlib.image
import numpy as np
import xarray as xr

import tokensweep
from tokensweep.pipeline.execute import pending_partitions, run_partition
from tokensweep.pipeline.report import figures
from tokensweep.pipeline.report.page import write_report
from tokensweep.pipeline.store.lifecycle import prepare_store


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entry", default="quickstart")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sweep = tokensweep.load_spec(args.entry)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "cube.zarr"
        prepare_store(sweep, store)
        for i in pending_partitions(sweep, store):
            run_partition(sweep, store, i)
        ds = xr.open_zarr(store, consolidated=False)
        write_report(ds, Path(tmp) / "warm")  # imports, the theory's caches
        levels = {"Pillow's default (6)": {}, f"the report's {figures.PNG}": dict(figures.PNG)}
        times, pngs = {k: [] for k in levels}, {}
        for r in range(args.repeats):
            for label, options in levels.items():
                figures.PNG.clear()
                figures.PNG.update(options)
                out = Path(tmp) / f"report-{r}-{list(levels).index(label)}"
                t0 = time.perf_counter()
                write_report(ds, out)
                times[label].append(time.perf_counter() - t0)
                pngs[label] = sorted(out.glob("*.png"))
        print(f"{args.entry}: {len(next(iter(pngs.values())))} figures, {args.repeats} reports per level")
        for label in levels:
            size = sum(p.stat().st_size for p in pngs[label])
            print(f"  {label:32s} {statistics.median(times[label]):6.2f} s per report, {size / 1e3:7.0f} kB of PNG")
        a, b = pngs.values()
        same = all(np.array_equal(matplotlib.image.imread(x), matplotlib.image.imread(y)) for x, y in zip(a, b))
        print(f"  same pixels in every figure: {same}")


if __name__ == "__main__":
    main()
