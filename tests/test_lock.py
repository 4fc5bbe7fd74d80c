"""The store's lock (`pipeline.store.lock`) on its way out: released whatever strikes meanwhile."""

from __future__ import annotations

import pytest

from tokensweep.pipeline.store import location
from tokensweep.pipeline.store.lock import lock_path, store_lock


def test_an_interrupt_during_the_release_still_removes_the_lock(tmp_path, monkeypatch):
    """A second Ctrl-C (or signal) striking while the lock is removed is held until it is gone."""
    store = tmp_path / "kept.zarr"
    delete, strikes = location.delete, []

    def interrupted_once(target):
        if not strikes:
            strikes.append(target)
            raise KeyboardInterrupt  # as a signal's handler raises it, mid-release
        delete(target)

    monkeypatch.setattr(location, "delete", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        with store_lock(store):
            assert lock_path(store).exists()
            raise KeyboardInterrupt  # the first Ctrl-C, in the sweep
    assert strikes == [lock_path(store)] and not lock_path(store).exists()


def test_an_error_during_the_release_is_raised_at_once(tmp_path, monkeypatch):
    store = tmp_path / "kept.zarr"
    calls = []
    monkeypatch.setattr(location, "delete", lambda target: calls.append(target) or int("x"))
    with pytest.raises(ValueError):
        with store_lock(store):
            pass
    assert calls == [lock_path(store)] and lock_path(store).exists()
