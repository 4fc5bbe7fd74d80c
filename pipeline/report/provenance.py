"""Where a report's numbers come from, read from the cube's attributes (pipeline/store/provenance.py and
pipeline/store/layout.py write them): code version, spec, seed, when and where the cube was created and
last written, the hosts that computed it, its history; and which code wrote the report.

"updated" is the latest `finished` time of a done partition (the store records one per
partition), so it moves when a sweep is resumed or grown; `completed_at` is set once every
partition is done.
"""

from __future__ import annotations

import json
import time

import numpy as np
import xarray as xr
import yaml

from ..spec.base import SPEC_ATTR
from ..store.provenance import code_version

__all__ = ["provenance", "last_written"]


def last_written(ds: xr.Dataset) -> str | None:
    """The latest `finished` time of a done partition, ISO 8601 UTC; None if none is recorded."""
    if "finished" not in ds:
        return None
    finished = ds["finished"]
    if "status" in ds:
        finished = finished.where(ds["status"] == _done_value(ds))
    latest = finished.max().values
    if not np.issubdtype(np.asarray(latest).dtype, np.datetime64) or np.isnat(latest):
        return None
    return np.datetime_as_string(latest, unit="s") + "Z"


def provenance(ds: xr.Dataset) -> dict:
    """{'facts': [(name, value)], 'spec': YAML text of the stored spec}."""
    attrs = ds.attrs
    facts = [("code version", attrs.get("code_version", "not recorded"))]
    if "seed" in attrs:
        facts.append(("seed", attrs["seed"]))
    if attrs.get("seeding_scheme"):
        facts.append(("seeding scheme", attrs["seeding_scheme"]))
    if attrs.get("created_at"):
        facts.append(("created", f"{attrs['created_at']} on {attrs.get('created_on', '?')}"))
    updated = last_written(ds)
    if updated:
        facts.append(("updated (last partition written)", updated))
    if attrs.get("completed_at"):
        facts.append(("completed", attrs["completed_at"]))
    if attrs.get("worker_hosts"):
        facts.append(("worker hosts", ", ".join(map(str, attrs["worker_hosts"]))))
    if attrs.get("history"):
        facts.append(("history", str(attrs["history"]).replace("\n", "; ")))
    if attrs.get("software_versions"):
        versions = json.loads(attrs["software_versions"])
        facts.append(("software", ", ".join(f"{k} {v}" for k, v in versions.items())))
    if "status" in ds:
        facts.append(("partitions done", f"{int((ds['status'] == _done_value(ds)).sum())} of "
                                         f"{int(ds['status'].size)}"))
    facts.append(("report written", f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} by "
                                    f"tokensweep {code_version()}"))
    spec = attrs.get(SPEC_ATTR)
    text = yaml.safe_dump(json.loads(spec), sort_keys=False) if spec else ""
    return {"facts": [(k, str(v)) for k, v in facts], "spec": text}


def _done_value(ds: xr.Dataset):
    meanings = str(ds["status"].attrs.get("flag_meanings", "pending done failed")).split()
    return list(ds["status"].attrs.get("flag_values", range(len(meanings))))[meanings.index("done")]
