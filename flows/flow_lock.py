"""The store's lock as the Prefect flow sees it: which flow run holds it, and its end if it died.

The sweep flow takes the store's lock (`pipeline.store.lock.store_lock`) recording its own flow-run id
and the API it reports to. A flow process killed outright (SIGKILL, out of memory, node lost)
never tells Prefect, so its run would stay Running in the UI forever. Whoever finds its lock
stale, the next `tokensweep run`/`rerun`, a flow run of the deployment, or `tokensweep
unlock`, sets that flow run Crashed through the API (only if it is still Running or Pending:
a run that ended, or was retried since, is left alone).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from ..pipeline.errors import StoreError
from ..pipeline.store.lock import is_stale, read_lock, store_lock

UNFINISHED = ("RUNNING", "PENDING")


@contextmanager
def flow_lock(store: str | Path):
    """`store_lock` from inside a flow run, recording the run; a stale lock found is reported Crashed."""
    from prefect.runtime import flow_run
    from prefect.settings import get_current_settings

    api = get_current_settings().api.url
    try:
        with store_lock(store, flow_run_id=flow_run.id, prefect_api=str(api) if api else None) as owner:
            yield owner
    except StoreError:
        mark_crashed_if_stale(store)
        raise


def mark_crashed_if_stale(store: str | Path) -> str | None:
    """If `store`'s lock is stale, set its flow run Crashed; return what was done, in words."""
    held = read_lock(store)
    if held and is_stale(held):
        return mark_crashed(held)
    return None


def mark_crashed(held: dict, timeout: float = 10.0) -> str | None:
    """Set the flow run recorded in the lock `held` Crashed, if still Running/Pending.

    Returns a line saying what happened (None when the lock names no flow run). Never raises:
    the lock is the store's business; Prefect's view of it is a courtesy."""
    run_id, api = held.get("flow_run_id"), held.get("prefect_api")
    if not run_id or not api:
        return None
    from .server import healthy, prefect_api

    if not healthy(api):
        return f"flow run {run_id} not marked Crashed: no Prefect server answers at {api}"
    try:
        from prefect.client.orchestration import get_client
        from prefect.states import Crashed

        with prefect_api(api), get_client(sync_client=True) as client:
            run = client.read_flow_run(run_id)
            state = run.state.type.value if run.state else None
            if state not in UNFINISHED:
                return f"flow run {run.name} ({run_id}) is {state}, left as it is"
            client.set_flow_run_state(run_id, Crashed(message=(
                f"the flow process (pid {held.get('pid')} on {held.get('host')}) died without "
                "releasing the store's lock")), force=True)
            return f"flow run {run.name} ({run_id}) marked Crashed"
    except Exception as err:  # the API refused or timed out: say so, keep going
        return f"flow run {run_id} not marked Crashed: {type(err).__name__}: {err}"
