"""The exceptions every layer raises, in one leaf module (it imports nothing of the project).

Each message names what is wrong and the fix, so the CLI prints it as it is; the API re-exports
them (``tokensweep.SpecError`` ...). Kept apart from the modules that raise them so that a caller
(flows, the CLI, a test) can catch one without importing the machinery behind it.
"""

from __future__ import annotations

__all__ = ["SpecError", "ScaleError", "StoreError", "SweepError"]


class SpecError(ValueError):
    """A spec that cannot run; the message names the field and the fix."""


class ScaleError(SpecError):
    """A scale the spec does not have, or a malformed `scales` block."""


class StoreError(ValueError):
    """A store that cannot be used as asked; the message says why and what to do."""


class SweepError(RuntimeError):
    """A sweep that ran but did not finish: partitions failed (rerun to redo only those)."""
