"""Tables computed once per report: a report's sections, its claims and its summary ask for the
same statistics of the same cube (the antipodal table at T, at every checkpoint, the horizon table)
many times over; each is an xarray computation of tens of milliseconds to seconds.

`once(func)` marks a table function; inside `with tables_once():` (what `write_report` does) a call
with the same Dataset object and the same arguments returns a copy of the first call's table,
outside it every call computes as always. The copy is deep, so that a caller adding or changing a
column (the sections do) never changes what the next one gets; the Dataset is held with its
tables, so that its `id` cannot be reused for another during the block.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect

__all__ = ["once", "tables_once"]

_TABLES: contextvars.ContextVar[dict | None] = contextvars.ContextVar("tokensweep_tables", default=None)


@contextlib.contextmanager
def tables_once():
    """Within the block, a table function marked `once` computes each (Dataset, arguments) once."""
    token = _TABLES.set({})
    try:
        yield
    finally:
        _TABLES.reset(token)


def once(func):
    """Mark `func(ds, ...) -> Dataset | None` as computed once per `tables_once` block."""
    signature = inspect.signature(func)

    @functools.wraps(func)
    def wrapper(ds, *args, **kwargs):
        tables = _TABLES.get()
        if tables is None:
            return func(ds, *args, **kwargs)
        bound = signature.bind(ds, *args, **kwargs)
        bound.apply_defaults()
        key = (func.__qualname__, id(ds), *tuple(bound.arguments.items())[1:])
        try:
            hash(key)
        except TypeError:  # an argument that cannot be a key (a list): computed every time
            return func(ds, *args, **kwargs)
        if key not in tables:
            tables[key] = (ds, func(ds, *args, **kwargs))
        table = tables[key][1]
        return None if table is None else table.copy(deep=True)

    return wrapper
