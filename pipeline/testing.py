"""Test hooks: fault injection for the tests of failures, retries and reruns. Inactive in production.

``TOKENSWEEP_FAIL_PARTITIONS="INDEX[,INDEX...]"`` makes those partitions raise. The same list may
come from a file named by ``TOKENSWEEP_FAIL_PARTITIONS_FILE``, read at each partition, so a test
can switch faults on and off under long-lived workers (a retry that succeeds). When neither
variable is set as the process starts, `fault_injector` returns None and `execute.run_partition`
calls nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

FAIL_PARTITIONS_ENV = "TOKENSWEEP_FAIL_PARTITIONS"
FAIL_PARTITIONS_FILE_ENV = "TOKENSWEEP_FAIL_PARTITIONS_FILE"


def fault_injector() -> Optional[Callable[[int], None]]:
    """A function of the partition index that raises for the listed ones; None when none is set."""
    listed = os.environ.get(FAIL_PARTITIONS_ENV, "")
    switch = os.environ.get(FAIL_PARTITIONS_FILE_ENV)
    if not listed and not switch:
        return None

    def inject(index: int) -> None:
        wanted = listed.split(",")
        if switch:
            try:
                wanted += Path(switch).read_text().replace("\n", ",").split(",")
            except OSError:
                pass
        if str(index) in (w.strip() for w in wanted):
            raise RuntimeError(f"injected failure in partition {index} ({FAIL_PARTITIONS_ENV})")

    return inject
