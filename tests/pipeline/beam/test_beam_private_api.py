"""Beam's private API that bertprep uses, named in one place: an upgrade of Beam that renames or changes any
of it fails here, by name, before a Dask run fails somewhere inside the adapter. setup.cfg admits only the
Beam versions these passed with (its bound); raise it together with this file."""

from __future__ import annotations

import configparser
from importlib.metadata import version
from pathlib import Path

from packaging.specifiers import SpecifierSet

from conftest import need_module

ROOT = Path(__file__).resolve().parents[3]

#: (module, private name) for every private Beam symbol ``pipeline/beam/dask_runner.py`` imports.
PRIVATE_IMPORTS = [
    ("apache_beam.runners.common", "_OutputHandler"),
    ("apache_beam.runners.dask.overrides", "_Create"),
    ("apache_beam.runners.dask.overrides", "_Flatten"),
    ("apache_beam.runners.dask.overrides", "_GroupByKeyOnly"),
    ("apache_beam.runners.dask.overrides", "_Reshuffle"),
]


def test_every_private_beam_class_the_dask_adapter_imports_is_there():
    need_module("dask")
    import importlib

    for module, name in PRIVATE_IMPORTS:
        assert hasattr(importlib.import_module(module), name), f"Beam {version('apache-beam')}: {module}.{name}"
    source = (ROOT / "pipeline" / "beam" / "dask_runner.py").read_text()
    for _, name in PRIVATE_IMPORTS:
        assert name in source  # the list is the adapter's, not a stale one


def test_the_credentials_cache_the_emulator_path_sets_is_there():
    """``remote._no_credentials_search`` records "no credentials" in Beam's private credentials cache when a GCS
    emulator is set (else Beam searches for Google's credentials for ~25 s first); it is guarded (a Beam without
    the cache searches as before), and this names the names it needs."""
    need_module("google.cloud.storage")
    from apache_beam.internal.gcp import auth

    cache = auth._Credentials
    for name in ("_credentials_lock", "_credentials_init", "_credentials"):
        assert hasattr(cache, name), f"Beam {version('apache-beam')}: auth._Credentials.{name}"
    assert "_Credentials" in (ROOT / "pipeline" / "remote.py").read_text()


def test_the_output_handler_takes_the_arguments_the_adapter_passes():
    from apache_beam.runners.common import Receiver, _OutputHandler
    from apache_beam.transforms.window import GlobalWindows

    class Collect(Receiver):
        def __init__(self):
            self.values = []

        def receive(self, windowed_value):
            self.values.append(windowed_value.value)

    main = Collect()
    handler = _OutputHandler(  # the keyword arguments dask_runner._run_dofn passes (compiled: no signature)
        window_fn=GlobalWindows(),
        main_receivers=main,
        tagged_receivers={},
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    assert handler is not None and hasattr(handler, "handle_process_outputs")


def test_a_side_input_has_the_private_members_the_adapter_reads():
    import apache_beam as beam

    with beam.Pipeline() as pipeline:
        side = beam.pvalue.AsSingleton(pipeline | beam.Create([1]))
        assert callable(side._view_options) and isinstance(side._view_options(), dict)
        assert callable(side._window_mapping_fn)


def test_the_installed_beam_is_within_setup_cfgs_bounds():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config["options"]["install_requires"].splitlines()
    (requirement,) = [line.strip() for line in lines if line.strip().startswith("apache-beam")]
    bounds = SpecifierSet(requirement.removeprefix("apache-beam"))
    assert any(spec.operator == "<" for spec in bounds)  # an upper bound: the private API may change
    assert version("apache-beam") in bounds
