"""Fail fast on a remote path (``gs://...``) that cannot work, instead of after the client's retries.

Without network, Google's client libraries look for credentials on the GCE metadata server and retry the
storage API with back-off: a ``-o gs://...`` run ended in a traceback after about 112 s. :func:`check_remote_path`
answers in seconds, before anything is read or written: the scheme needs a Beam filesystem that is
installed (``apache-beam[gcp]`` for ``gs://``), Google credentials must be findable without waiting on the
metadata server for long, and the storage endpoint must accept a TCP connection within ``timeout``. Standard
library and Beam only (no google imports: they are what hangs).
"""

from __future__ import annotations

import functools
import os
import socket
import threading

#: Seconds each network probe may take.
PROBE_TIMEOUT_S = 3.0

_GCS_ENDPOINT = ("storage.googleapis.com", 443)
_METADATA_SERVER = ("169.254.169.254", 80)


class RemotePathError(ValueError):
    """A remote path that cannot be used from here; the message names it, the option and the fix."""


@functools.cache
def _reachable(address: tuple[str, int], timeout: float) -> str | None:
    """None when a TCP connection to ``address`` opens within ``timeout``, else why not (asked once per
    process: a pipeline checks its inputs, vocab and output). The name lookup, which has no timeout of its
    own, runs in a daemon thread given the same time."""
    answer: list[str | None] = []
    probe = threading.Thread(target=lambda: answer.append(_connect(address, timeout)), daemon=True)
    probe.start()
    probe.join(timeout + 1.0)
    return answer[0] if answer else f"no answer within {timeout:g} s (looking up {address[0]})"


def _connect(address: tuple[str, int], timeout: float) -> str | None:
    try:
        with socket.create_connection(address, timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as err:
        return err.strerror or str(err)


def _gcs_credentials_found(timeout: float) -> bool:
    """Whether Google's default credentials can be found: the environment variable, gcloud's application
    default credentials file, or a metadata server that answers (on Google Cloud)."""
    if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return True
    config = os.environ.get("CLOUDSDK_CONFIG") or os.path.join(os.path.expanduser("~"), ".config", "gcloud")
    if os.path.isfile(os.path.join(config, "application_default_credentials.json")):
        return True
    return _reachable(_METADATA_SERVER, min(timeout, 1.0)) is None


def check_remote_path(path: str, option: str, *, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Refuse, within seconds, a remote ``path`` given as ``option`` that cannot be reached. Local paths and
    schemes other than ``gs://`` only get the "filesystem installed" check.

    Raises:
        RemotePathError: no Beam filesystem for the scheme, no Google credentials, or the storage endpoint
            does not answer (each with the fix).
    """
    if "://" not in path:
        return
    from apache_beam.io.filesystems import FileSystems

    try:
        FileSystems.get_filesystem(path)
    except ValueError:
        extra = " (pip install 'apache-beam[gcp]')" if path.startswith("gs://") else ""
        raise RemotePathError(
            f"{option} {path}: no filesystem for {path.split('://')[0]}:// is installed{extra}; install it or "
            "use a local path"
        ) from None
    if not path.startswith("gs://"):
        return
    if not _gcs_credentials_found(timeout):
        raise RemotePathError(
            f"{option} {path}: no Google Cloud credentials found (GOOGLE_APPLICATION_CREDENTIALS unset, no "
            "gcloud application-default credentials, no metadata server); run `gcloud auth application-default "
            "login` or set GOOGLE_APPLICATION_CREDENTIALS, or use a local path"
        )
    why = _reachable(_GCS_ENDPOINT, timeout)
    if why:
        raise RemotePathError(
            f"{option} {path}: cannot reach {_GCS_ENDPOINT[0]} ({why}); check the network or proxy, or use a local path"
        )


__all__ = ["PROBE_TIMEOUT_S", "RemotePathError", "check_remote_path"]
