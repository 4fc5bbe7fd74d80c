"""The `tokensweep` command: run by the warm process where one answers, else in this one.

Only the standard library and the package's root are imported before the hand-off
(`warm_cli.py`); the CLI itself (typer, the pipeline, Prefect) only when the command runs here.
"""

from __future__ import annotations

import os
import sys

from . import warm_cli


def main() -> None:
    argv, env = list(sys.argv), dict(os.environ)
    code = warm_cli.handoff(argv)
    if code is not None:
        sys.exit(code)
    from . import fast_exit
    from .cli import main as run_here

    fast_exit.before_exit(lambda code: warm_cli.leave_host(argv, env))
    run_here()
