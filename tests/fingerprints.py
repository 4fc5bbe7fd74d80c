"""Fingerprints of the numbers tokensweep computes, to prove that a refactor changed none.

For every catalog entry (small scale), the first and the last partition of its plan are
simulated in this process (`execute.simulate_partition`: the kernels every sweep runs) and
hashed: SHA-256 over each output's name, dtype, shape and bytes. The quick tier hashes the
first `HEAD` trajectories of each (a trajectory's numbers do not depend on the partition it is
computed in). The whole partitions are checked where the catalog's test of its small entries
has run each entry end to end: read back from its store (`partitions_problem`), so no partition
is computed twice; the quickstart's whole cube too (`cube_problem`).

A path whose last bits depend on the CPU (the sphere flow's BLAS products differ by 1-3 ulp
per step between AMD and Intel nodes) cannot be fingerprinted once for every machine, so the
hashes are kept per CPU type (`cpu_key`). On a CPU type with no hashes the heads are instead
compared with the numbers stored beside the hashes (`fingerprints.npz`), within ROUNDING.

    python tests/fingerprints.py            # print this tree's fingerprints against the file
    python tests/fingerprints.py --write    # record them for this CPU type (after a change
                                            # that is meant to change numbers: say so in the commit)
    python tests/fingerprints.py --summaries  # rewrite summaries whose output list is stale
    python tests/fingerprints.py --new      # record the arrays and summaries of entries that have
                                            # none yet (a new entry), no hashes: on a CPU type
                                            # that has hashes, its slots are checked within ROUNDING
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
FILE = HERE / "fingerprints.json"
ARRAYS = HERE / "fingerprints.npz"
HEAD = 2  # trajectories per partition in the quick tier's fingerprints
# Floats of another CPU type: relative and absolute tolerance, and the share of integer
# entries (cluster classes, counts, hitting layers) allowed to differ where a rounding
# difference moves a trajectory across a threshold.
ROUNDING = {"rtol": 1e-6, "atol": 1e-9, "integer_share": 0.02}
# The real networks run in float32 through torch, whose CPU kernels (oneDNN, MKL) choose their
# code by CPU type: a unit-scale output moves by ~1e-7 between CPU types (measured 2-3e-7 between
# the Intel type of the hashes and an AMD EPYC on overlap_min)
ROUNDING_FLOAT32 = {**ROUNDING, "rtol": 1e-5, "atol": 1e-5}


@functools.cache
def network_entries() -> frozenset[str]:
    import tokensweep

    return frozenset(entry.name for entry in tokensweep.catalog() if entry.model == "network")


def rounding_of(name: str) -> dict:
    """The tolerances another CPU type's rounding needs for an entry's outputs."""
    return ROUNDING_FLOAT32 if name in network_entries() else ROUNDING


def cpu_key() -> str:
    """The CPU type the BLAS products depend on: vendor and model name, as Linux reports them."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return f"{fields.get('vendor_id', platform.machine())} | {fields.get('model name', platform.processor())}"


def digest(outputs: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(outputs):
        a = np.ascontiguousarray(outputs[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def partitions(name: str, head: int | None):
    """(label, sweep, partition, plan) of an entry's first and last partition (cut to `head`)."""
    from tokensweep.pipeline.plan import Plan
    from tokensweep.pipeline.spec.load import load_sweep

    sweep = load_sweep(name)
    plan = Plan(sweep)
    for label, part in (("first", plan[0]), ("last", plan[len(plan) - 1])):
        if head is not None:
            part = part._replace(traj_stop=min(part.traj_stop, part.traj_start + head))
        yield label, sweep, part, plan


def entry_outputs(name: str, head: int | None) -> dict[str, dict[str, np.ndarray]]:
    """The outputs of an entry's first and last partition, each computed once: an entry of one
    partition (14 at the small scale, the real networks among them) has the same first and last."""
    from tokensweep.pipeline.execute import simulate_partition

    computed, out = {}, {}
    for label, sweep, part, plan in partitions(name, head):
        if part not in computed:
            computed[part] = simulate_partition(sweep, part, plan)
        out[label] = computed[part]
    return out


def catalog_names() -> list[str]:
    import tokensweep

    return [entry.name for entry in tokensweep.catalog()]


def cube_digest(store) -> str:
    """A stored cube's numbers, read with zarr itself: every array but the partitions' times."""
    import zarr

    group = zarr.open_group(str(store), mode="r")
    return digest({name: array[...] for name, array in group.arrays()
                   if name not in ("started", "finished")})


def cube_problem(store, name: str, record: dict) -> str | None:
    """None when a whole stored cube of `name` has the recorded numbers, else what differs: the
    digest on the CPU type it was recorded on, the per-output summaries within ROUNDING elsewhere."""
    if cpu_key() in record.get("cube_by_cpu", {}):
        want = record["cube_by_cpu"][cpu_key()][name]
        return None if cube_digest(store) == want else f"cube/{name}: digest differs from {want[:16]}"
    import zarr

    group = zarr.open_group(str(store), mode="r")
    out = {n: a[...] for n, a in group.arrays() if n not in ("started", "finished")}
    return summaries_agree(summary(out), record["summaries"][f"cube/{name}"])


def stored_partition(store, sweep, part, plan) -> dict[str, np.ndarray]:
    """A partition's outputs read back from a store, in the kernel's layout (trajectories first,
    then checkpoints where per checkpoint, then trailing dimensions): `chunks.Region.place` undone."""
    from tokensweep.pipeline.models import get_model
    from tokensweep.pipeline.spec.recording import declared_outputs
    from tokensweep.pipeline.store.chunks import Region, StoreArrays

    region = Region.of_partition(plan, StoreArrays(store, mode="r"), part)
    axes, first = list(plan.axes), part.block * sweep.partition_traj
    out = {}
    for name, spec in declared_outputs(get_model(sweep.model), sweep).items():
        stored = region.arrays[name].metadata.dimension_names
        trajectories = slice(part.traj_start - first, part.traj_stop - first)
        values = region.read(name)[tuple(0 if d in axes else trajectories if d == "traj" else slice(None)
                                         for d in stored)]
        left = [d for d in stored if d not in axes]
        kernel = ("traj", "t", *spec.extra_dims) if spec.per_checkpoint else ("traj", *spec.extra_dims)
        out[name] = np.transpose(values, [left.index(d) for d in kernel]).astype(spec.dtype, copy=False)
    return out


def partitions_problem(store, name: str, record: dict) -> str | None:
    """None when the first and last partitions of a stored small-scale cube of `name` have the
    recorded numbers (as `cube_problem`), else the first that differs."""
    known = record.get("by_cpu", {}).get(cpu_key(), {})
    for label, sweep, part, plan in partitions(name, None):
        out, slot = stored_partition(store, sweep, part, plan), f"{name}/{label}/whole"
        if slot in known:
            if digest(out) != known[slot]:
                return f"{slot}: digest differs from {known[slot][:16]}"
        elif (problem := summaries_agree(summary(out), record["summaries"][slot])) is not None:
            return f"{slot}: {problem}"
    return None


def summary(outputs: dict[str, np.ndarray]) -> dict[str, list[float]]:
    """What another CPU type's rounding leaves nearly unchanged: per output, the mean and the
    NaN count of a float, the sum and the nonzero count of an integer."""
    out = {}
    for name in sorted(outputs):
        a = np.asarray(outputs[name])
        if np.issubdtype(a.dtype, np.floating):
            finite = a[np.isfinite(a)]
            out[name] = [float(finite.mean()) if finite.size else 0.0, float(a.size - finite.size)]
        else:
            out[name] = [float(a.astype(np.int64).sum()), float(np.count_nonzero(a))]
    return out


def summaries_agree(got: dict, want: dict) -> str | None:
    """None when two summaries agree within ROUNDING, else the first output that differs."""
    if sorted(got) != sorted(want):
        return f"outputs {sorted(got)} != {sorted(want)}"
    for name in want:
        (g0, g1), (w0, w1) = got[name], want[name]
        share = ROUNDING["integer_share"]
        if not (np.isclose(g0, w0, rtol=max(ROUNDING["rtol"], share), atol=ROUNDING["atol"])
                and abs(g1 - w1) <= share * max(abs(w1), 1.0)):
            return f"{name}: {got[name]} != {want[name]}"
    return None


def load() -> dict:
    return json.loads(FILE.read_text()) if FILE.exists() else {}


def close_enough(got: np.ndarray, want: np.ndarray, rounding: dict = ROUNDING) -> str | None:
    """None when `got` is `want` up to another CPU's rounding (`rounding_of` the entry), else what
    differs."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {got.shape} {got.dtype} != {want.shape} {want.dtype}"
    if np.issubdtype(got.dtype, np.floating):
        if np.allclose(got, want, rtol=rounding["rtol"], atol=rounding["atol"], equal_nan=True):
            return None
        return f"max |difference| {np.nanmax(np.abs(got - want)):.3g}"
    differ = np.count_nonzero(got != want)
    if differ <= rounding["integer_share"] * got.size:
        return None
    return f"{differ} of {got.size} entries differ"


def add_new(record: dict) -> int:
    """Record the head arrays and the summaries of the entries that have none (`--new`)."""
    names = [n for n in catalog_names() if not any(slot.startswith(f"{n}/") for slot in record["summaries"])]
    with np.load(ARRAYS) as stored:
        arrays = dict(stored)
    for name in names:
        for head, tier in ((HEAD, "head"), (None, "whole")):
            for label, out in entry_outputs(name, head).items():
                slot = f"{name}/{label}/{tier}"
                record["summaries"][slot] = summary(out)
                if tier == "head":
                    arrays.update({f"{slot}/{k}": v for k, v in out.items()})
                print(f"new {slot} (arrays and summary, no hash)")
    FILE.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    np.savez_compressed(ARRAYS, **arrays)
    return 0


def refresh_summaries(record: dict) -> int:
    """Rewrite the summaries whose outputs are not the entry's outputs now (`--summaries`): an output
    added since they were taken (a hash on the CPU type of the hashes was rewritten then, the summary
    kept, so other CPU types compared against a stale list)."""
    for name in catalog_names():
        for label, out in entry_outputs(name, None).items():
            slot = f"{name}/{label}/whole"
            if sorted(record["summaries"].get(slot, {})) != sorted(out):
                record["summaries"][slot] = summary(out)
                print(f"refreshed {slot}")
    FILE.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return 0


def main(argv: list[str]) -> int:
    if "--new" in argv:
        return add_new(load())
    if "--summaries" in argv:
        return refresh_summaries(load())
    write = "--write" in argv
    key, record = cpu_key(), load()
    mine = record.setdefault("by_cpu", {}).setdefault(key, {})
    arrays = {}
    changed = 0
    for name in catalog_names():
        for head, tier in ((HEAD, "head"), (None, "whole")):
            outputs = entry_outputs(name, head)
            for label, out in outputs.items():
                slot = f"{name}/{label}/{tier}"
                value = digest(out)
                old = mine.get(slot)
                if old != value:
                    changed += 1
                    print(f"{'new' if old is None else 'CHANGED'} {slot} {value[:16]}", flush=True)
                mine[slot] = value
                record.setdefault("summaries", {})[slot] = summary(out)  # what the other CPU types compare
                if tier == "head":
                    arrays.update({f"{slot}/{k}": v for k, v in out.items()})
    print(f"{changed} fingerprints new or changed on {key}")
    if write:
        FILE.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        np.savez_compressed(ARRAYS, **arrays)
        print(f"written: {FILE}, {ARRAYS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
