"""``python -m tokensweep.flows.cli``: the `tokensweep` command."""

from . import console

if __name__ == "__main__":  # not on import (the doctest walk imports every module)
    console()
