"""The open-problem table from the stores of a boundary search: P(at least one antipodal pair) at
the spec's beta values per (n, d), with the onset the search found (its JSON output).

    tokensweep boundary benchmarks/open_any_pair.yaml --outcome any_pair --level 0.05 \\
        --width 0.25 --max-trajectories 12800 --json > onset.json
    python benchmarks/open_any_pair_table.py benchmarks/open_any_pair.yaml onset.json

Every probability uses every trajectory the cell's store holds (the search grows them all).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokensweep.pipeline.analysis.antipodal import any_antipodal_table
from tokensweep.pipeline.search_store import boundary_folder, cell_tag
from tokensweep.pipeline.spec.load import load_sweep
from tokensweep.pipeline.store.cube import open_cube


def main(spec: str, onset: str) -> None:
    sweep = load_sweep(spec)
    betas = sweep.axes["beta"]
    records = json.loads(Path(onset).read_text()) if Path(onset).is_file() else []
    found = {(r["n"], r["d"]): r for r in records}
    print("| n | d | " + " | ".join(f"beta = {b:g}" for b in betas) + " | onset (P = level) | 95 % interval | trajectories |")
    print("|---|---|" + "---|" * len(betas) + "---|---|---|")
    for n in sweep.axes["n"]:
        for d in sweep.axes["d"]:
            path = boundary_folder(sweep) / f"{cell_tag({'d': d, 'n': n})}.zarr"
            if not (path / "zarr.json").is_file():
                continue
            with open_cube(path) as ds:
                table = any_antipodal_table(ds.sel(beta=list(betas))).isel(t=-1).squeeze()
                cells = [f"{float(table.p_any.sel(beta=b)):.3f} ({int(table.n_traj.sel(beta=b))})"
                         for b in betas]
            r = found.get((n, d))
            onset_cells = ["search not run"] * 3 if r is None else \
                [f"{r['estimate']:.3f}", f"[{r['low']:.3f}, {r['high']:.3f}]", str(r["trajectories"])] \
                if r["estimate"] is not None else [r["status"], "", str(r["trajectories"])]
            print(f"| {n} | {d} | " + " | ".join(cells) + " | " + " | ".join(onset_cells) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
