"""Which of bertprep's files a settings pass goes through, and how often it comes back to one it left.

Two passes, each traced with ``sys.setprofile`` (Python calls only, a generator's resumption counting as a
call; C functions are not code of ours):

- ``make-shards``: a typical option set (``-i`` two files, ``--vocab``, ``-o``, ``--max-seq-length 128``,
  ``--dupe-factor 5``, ``--do-whole-word-mask``) through click's parsing of the command's options (their
  callbacks and types) to ``cli/shards_options.shards_config``, which builds the ``ShardsConfig`` (its
  ``InstanceConfig`` and ``MaskingConfig``, validated in their ``__post_init__``) and loads the vocab, as the
  command's body does before it starts the run;
- ``evaluate squad``: its options (``-m``, ``--train-file``, ``--dev-file``, ``-o``, ``--seeds 3``, ``--set``)
  through click's parsing to the ``SquadEvalConfig`` the command builds from them.

Only frames of the project's own packages count: ``core/``, ``pipeline/``, ``bert_model/`` and ``cli/``; calls
through other code (click, dataclasses, the standard library) are seen through, so a call from ``cli/`` that
reaches ``core/`` by way of click counts as ``cli -> core``. The modules the pass needs are imported first and
the bodies of modules a pass imports on the way are left out (import work, not the pass's calls), so the trace
is the same on every run. Printed per pass: the sequence of files entered (consecutive repeats collapsed; a
return into the caller's file is an entry too), the number of distinct files, the returns to a file already
left (entries of a file seen earlier in the sequence) and the climbs: calls from a lower layer into a higher
one (``core`` < ``pipeline`` and ``bert_model`` < ``cli``), each with its caller and callee. Reproduce with::

    python benchmarks/trace_calls.py
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "pipeline"
#: The layers, lowest first: a call from a lower layer into a higher one is a climb.
LAYERS = {"core": 0, "pipeline": 1, "bert_model": 1, "cli": 2}


def project_file(filename: str) -> str | None:
    """``cli/options.py`` for a file of the project's packages, else None."""
    try:
        relative = Path(filename).resolve().relative_to(REPO)
    except ValueError:
        return None
    return relative.as_posix() if relative.parts[0] in LAYERS else None


def layer(path: str) -> int:
    return LAYERS[path.split("/", 1)[0]]


class CallTrace:
    """A ``sys.setprofile`` function that keeps the project frames' stack, the files entered and the climbs."""

    def __init__(self) -> None:
        self.stack: list[tuple[FrameType, str]] = []  # the project frames active, innermost last
        self.entered: list[str] = []  # the innermost project file after each change
        self.climbs: collections.Counter[tuple[str, str]] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()  # calls into each file
        self.importing: FrameType | None = None  # a module body run by an import: left out, with what it calls

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.importing is not None:
            if event == "return" and frame is self.importing:
                self.importing = None
            return
        if event not in ("call", "return"):
            return
        path = project_file(frame.f_code.co_filename)
        if path is None:
            return
        if event == "call":
            if frame.f_code.co_name == "<module>":
                self.importing = frame
                return
            caller = self.stack[-1][1] if self.stack else None
            if caller is not None and layer(path) > layer(caller):
                self.climbs[(caller, path)] += 1
            self.stack.append((frame, path))
            self.calls[path] += 1
        elif self.stack and self.stack[-1][0] is frame:
            self.stack.pop()
        current = self.stack[-1][1] if self.stack else None
        if current is not None and (not self.entered or self.entered[-1] != current):
            self.entered.append(current)

    def run(self, work: Callable[[], object]) -> object:
        sys.setprofile(self)
        try:
            return work()
        finally:
            sys.setprofile(None)

    def returns(self) -> int:
        """Entries of a file already entered earlier (and left since)."""
        return sum(1 for i, path in enumerate(self.entered) if path in self.entered[:i])

    def report(self, title: str) -> None:
        returns = self.returns()
        print(f"\n## {title}\n")
        print(
            f"{self.calls.total()} calls into project code; {len(self.entered)} file entries, {len(set(self.entered))} "
            f"distinct files; {returns} returns to a file already left; {sum(self.climbs.values())} climbs "
            "(a lower layer calling a higher one)"
        )
        print("\nfiles entered, in order:\n")
        lines = [""]
        for i, path in enumerate(self.entered):
            piece = path + (" >" if i < len(self.entered) - 1 else "")
            if lines[-1] and len(lines[-1]) + 1 + len(piece) > 116:
                lines.append("")
            lines[-1] = f"{lines[-1]} {piece}".strip()
        print("\n".join(lines))
        print("\nfiles, by entries (and calls into them):\n")
        for path, count in collections.Counter(self.entered).most_common():
            print(f"- {path}: {count} ({self.calls[path]} calls)")
        if self.climbs:
            print("\nclimbs (caller -> callee: calls):\n")
            for (caller, callee), count in sorted(self.climbs.items()):
                print(f"- {caller} -> {callee}: {count}")


def make_shards_pass(tmp: Path) -> Callable[[], object]:
    """make-shards' options -> ``ShardsConfig`` (and the vocab), as the command's body does."""
    from click.core import ParameterSource

    from bertprep.cli.make_shards import make_shards
    from bertprep.cli.shards_options import shards_config

    args = ["-i", f"{FIXTURES / 'a.txt'},{FIXTURES / 'b.txt'}", "--vocab", str(FIXTURES / "vocab.txt")]
    args += ["-o", str(tmp / "shards"), "--max-seq-length", "128", "--dupe-factor", "5", "--do-whole-word-mask"]

    def work() -> object:
        ctx = make_shards.make_context("make-shards", list(args))
        options = {k: v for k, v in ctx.params.items() if k not in ("beam_args", "quiet")}
        explicit = frozenset(k for k in options if ctx.get_parameter_source(k) is not ParameterSource.DEFAULT)
        config, _vocab, _warnings = shards_config(options, explicit)
        return config

    return work


def evaluate_squad_pass(tmp: Path) -> Callable[[], object]:
    """``evaluate squad``'s options -> ``SquadEvalConfig``, as the command's body does."""
    from bertprep.bert_model.evaluation.config import SquadEvalConfig
    from bertprep.cli.evaluate import squad

    (tmp / "model").mkdir()
    squad_file = tmp / "dev-v1.1.json"
    squad_file.write_text('{"version": "1.1", "data": []}', encoding="utf-8")
    args = ["-m", str(tmp / "model"), "--train-file", str(squad_file), "--dev-file", str(squad_file)]
    args += ["-o", str(tmp / "eval"), "--seeds", "3", "--set", "learning_rate=3e-5,5e-5"]

    def work() -> object:
        ctx = squad.make_context("squad", list(args))
        return SquadEvalConfig(**ctx.params)

    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args()
    print(f"command: python {' '.join(sys.argv)}")
    with tempfile.TemporaryDirectory() as tmp:
        for title, make_pass in (
            ("make-shards: options -> ShardsConfig", make_shards_pass),
            ("evaluate squad: options -> SquadEvalConfig", evaluate_squad_pass),
        ):
            folder = Path(tmp) / make_pass.__name__
            folder.mkdir()
            work = make_pass(folder)
            trace = CallTrace()
            result = trace.run(work)
            trace.report(f"{title} ({type(result).__name__} built)")


if __name__ == "__main__":
    main()
