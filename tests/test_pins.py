"""constraints.txt (what `make` and CI install with) pins every direct dependency and extra of setup.cfg to
one version, the one the suite passed with."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def _names(lines: str) -> set[str]:
    """The requirements' names that install on this Python (``tomli; python_version < "3.11"`` does not: the
    suite cannot have tested a version of it)."""
    names = set()
    for line in lines.splitlines():
        line = line.split("#")[0].strip()
        if line and (";" not in line or Requirement(line).marker.evaluate()):
            names.add(re.split(r"[\[<>=!~ ;]", line, maxsplit=1)[0].lower().replace("_", "-"))
    return names


def test_constraints_pin_every_direct_dependency_and_extra():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    wanted = _names(config["options"]["install_requires"])
    for extra in config["options.extras_require"].values():
        wanted |= _names(extra)
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, pinned = line.partition("==")
            assert pinned, f"constraints.txt: {line!r} is not a pin (name==version)"
            pins[name.lower().replace("_", "-")] = pinned
    assert wanted - set(pins) == set(), "unpinned in constraints.txt"
