"""``python -m tokensweep.flows.cli``: the `tokensweep` command."""

from . import console

console()
