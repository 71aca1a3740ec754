"""Connecting to a Dask scheduler for the Dask runner (``dask_runner.py``), and each way that fails as one line.

A run on a cluster meets three failures that ``distributed`` reports as tracebacks of retries, or not at all:

- no scheduler answers at ``--dask_client_address`` / ``--dask_scheduler_file`` (:func:`connect_or_explain`
  raises :class:`DaskSchedulerUnreachable` within ``--dask_connection_timeout``);
- the scheduler answers but no worker joins it (:func:`wait_for_a_worker` raises :class:`DaskNoWorkers`; the
  tasks would otherwise wait for ever);
- the scheduler goes away mid-run (the runner's result raises :class:`DaskSchedulerLost` with
  :func:`lost_message`, on the errors :data:`CONNECTION_LOST` lists, and :class:`LostConnectionRecords` keeps
  distributed's own tracebacks of it out of the log).

All three are ``ValueError``s (subclasses of :class:`DaskSchedulerUnreachable`) whose ``str()`` says what to do;
``dask_runner`` re-exports them. Needs the ``dask`` extra (``pip install 'bertprep[dask]'``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os

import distributed

from bertprep.core import storage

#: Seconds to wait for a scheduler when ``--dask_connection_timeout`` is not given.
DEFAULT_CONNECT_TIMEOUT_S = 10.0


class DaskSchedulerUnreachable(ValueError):
    """No Dask scheduler answered at the address (or scheduler file) given; ``str()`` is one line."""


def _unreachable_message(address: str) -> str:
    return (
        f"cannot reach the Dask scheduler at {address}: start one with `dask scheduler` "
        f"(and `dask worker {address}` on each machine), or leave --dask_client_address out to start "
        "a local cluster"
    )


def connect_or_explain(
    address: str | None = None,
    scheduler_file: str | None = None,
    timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
    **client_kwargs,
) -> distributed.Client:
    """A ``distributed.Client`` connected to ``address`` or ``scheduler_file``; else one clear line.

    Raises :class:`DaskSchedulerUnreachable` (a ValueError) within about ``timeout`` seconds when no
    scheduler answers, instead of distributed's traceback of retries and ``OSError: Timed out ...``.
    """
    if bool(address) == bool(scheduler_file):
        raise ValueError("give exactly one of a Dask scheduler address or a scheduler file")
    given = f"--dask_client_address {address}" if address else f"--dask_scheduler_file {scheduler_file}"
    if scheduler_file:
        if not os.path.exists(scheduler_file):
            raise DaskSchedulerUnreachable(
                f"no Dask scheduler file at {scheduler_file}: start the scheduler with "
                f"`dask scheduler --scheduler-file {scheduler_file}` (and `dask worker --scheduler-file "
                f"{scheduler_file}` on each machine), or leave --dask_scheduler_file out to start a local "
                "cluster"
            )
        try:
            with open(scheduler_file) as f:
                shown = json.load(f).get("address", scheduler_file)
        except (OSError, ValueError):
            shown = scheduler_file
        target = {"scheduler_file": scheduler_file}
    else:
        assert address  # (exactly one of the two, checked above)
        if not storage.scheme(address):
            address = "tcp://" + address
        shown = address
        target = {"address": address}
    try:
        return distributed.Client(**target, timeout=timeout, **client_kwargs)
    except (OSError, TimeoutError) as e:  # distributed raises OSError("Timed out trying to connect ...")
        raise DaskSchedulerUnreachable(_unreachable_message(shown)) from e
    except (ValueError, TypeError) as e:  # e.g. "missing port number in address 'not-an-address'"
        raise DaskSchedulerUnreachable(
            f"{given}: not a Dask scheduler address ({e}); give the tcp://HOST:PORT that "
            "`dask scheduler` prints, or leave --dask_client_address out to start a local cluster"
        ) from None


class DaskNoWorkers(DaskSchedulerUnreachable):
    """The scheduler answered but no worker joined it within the connection timeout."""


def wait_for_a_worker(client: distributed.Client, timeout: float) -> None:
    """Return once the scheduler has a worker; raise :class:`DaskNoWorkers` (one line) after ``timeout`` seconds
    (``--dask_connection_timeout``) without one. A scheduler without workers accepts the tasks and holds them
    for ever, without a word (the run hung)."""
    try:
        client.wait_for_workers(1, timeout=timeout)
    except (TimeoutError, OSError) as e:
        address = client.scheduler.address
        raise DaskNoWorkers(
            f"no Dask worker joined the scheduler at {address} within {timeout:g} s (--dask_connection_timeout): "
            f"start one with `dask worker {address}` on each machine, then run make-shards again"
        ) from e


class DaskSchedulerLost(DaskSchedulerUnreachable):
    """The scheduler went away (killed, its machine lost) while the run was computing."""


#: What distributed raises or logs when the scheduler's connection is gone.
CONNECTION_LOST = (
    asyncio.CancelledError,
    concurrent.futures.CancelledError,
    distributed.comm.CommClosedError,
    OSError,
)


def lost_message(address: str, unfinished: int, total: int) -> str:
    return (
        f"the Dask scheduler at {address} went away during the run ({unfinished} of {total} results never came "
        "back); nothing was published: start the scheduler and its workers again, then run make-shards again"
    )


class LostConnectionRecords(logging.Filter):
    """Drops distributed's ERROR records of a lost scheduler connection: the run reports it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (record.name.startswith("distributed") and isinstance(error, CONNECTION_LOST))
