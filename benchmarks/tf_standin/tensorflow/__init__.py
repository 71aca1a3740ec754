"""A stand-in ``tensorflow`` for running Google's ``create_pretraining_data.py`` without TensorFlow.

Only for ``benchmarks/bench_make_shards.py --original DIR``: that script puts ``benchmarks/tf_standin`` on
``PYTHONPATH`` for the original's process alone (never for bertprep's), so ``import tensorflow as tf`` in
the user's copy of ``create_pretraining_data.py`` and ``tokenization.py`` finds this module. It provides
just what those two files call (TF 1.x names):

- ``tf.flags`` (``DEFINE_string/bool/integer/float``, ``FLAGS``, ``mark_flag_as_required``) and
  ``tf.app.run()``, parsing ``--name=value`` / ``--name value`` / ``--[no]flag`` from ``sys.argv``;
- ``tf.gfile.GFile`` (the builtin ``open``) and ``tf.gfile.Glob`` (sorted ``glob.glob``, as TF's is);
- ``tf.logging`` (``info``, ``set_verbosity``, ``INFO``) on Python's ``logging``;
- ``tf.train.Example/Features/Feature/Int64List/FloatList`` as plain objects, and
  ``tf.python_io.TFRecordWriter`` writing each example as one JSON object per line (the feature names and
  values of the original's ``tf.train.Example``; the format of ``../shared/data/golden``).

The cost of the original's own work (reading, tokenizing, instance creation, building the per-instance
feature lists) is unchanged; only protobuf serialization and TFRecord framing are replaced by ``json``.
"""

from __future__ import annotations

import glob as _glob
import json
import logging as _logging
import sys
import types

# --- tf.flags / tf.app -------------------------------------------------------------------------------


class _Flags:
    def __init__(self):
        object.__setattr__(self, "_defs", {})  # name -> (type, default)
        object.__setattr__(self, "_values", {})
        object.__setattr__(self, "_required", set())

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no flag {name!r}") from None

    def __setattr__(self, name, value):
        self._values[name] = value

    def _define(self, kind, name, default):
        self._defs[name] = kind
        self._values[name] = default

    def _parse(self, argv):
        rest = [argv[0]] if argv else []
        args = list(argv[1:])
        while args:
            arg = args.pop(0)
            if not arg.startswith("--"):
                rest.append(arg)
                continue
            name, eq, value = arg[2:].partition("=")
            if name not in self._defs and name.startswith("no") and self._defs.get(name[2:]) is bool and not eq:
                self._values[name[2:]] = False
                continue
            if name not in self._defs:
                raise SystemExit(f"FATAL Flags parsing error: Unknown command line flag '{name}'")
            kind = self._defs[name]
            if kind is bool:
                self._values[name] = value.lower() in ("true", "1", "yes") if eq else True
                continue
            if not eq:
                value = args.pop(0)
            self._values[name] = kind(value)
        for name in self._required:
            if self._values.get(name) is None:
                raise SystemExit(f"FATAL Flags parsing error: flag --{name} must be specified.")
        return rest


FLAGS = _Flags()


def _definer(kind):
    def define(name, default, help=None):  # TF's signature
        FLAGS._define(kind, name, default)

    return define


flags = types.SimpleNamespace(
    FLAGS=FLAGS,
    DEFINE_string=_definer(str),
    DEFINE_bool=_definer(bool),
    DEFINE_boolean=_definer(bool),
    DEFINE_integer=_definer(int),
    DEFINE_float=_definer(float),
    mark_flag_as_required=lambda name: FLAGS._required.add(name),
)


def _run(main=None, argv=None):
    rest = FLAGS._parse(sys.argv if argv is None else argv)
    main = main or sys.modules["__main__"].main
    sys.exit(main(rest))


app = types.SimpleNamespace(run=_run)

# --- tf.gfile / tf.logging ------------------------------------------------------------------------


def _gfile_open(name, mode="r"):
    return open(name, mode, encoding=None if "b" in mode else "utf-8")


gfile = types.SimpleNamespace(GFile=_gfile_open, Open=_gfile_open, Glob=lambda pattern: sorted(_glob.glob(pattern)))

_log = _logging.getLogger("tensorflow")
if not _log.handlers:
    _handler = _logging.StreamHandler(sys.stderr)
    _handler.setFormatter(_logging.Formatter("INFO:tensorflow:%(message)s"))
    _log.addHandler(_handler)
    _log.propagate = False
logging = types.SimpleNamespace(
    INFO=_logging.INFO,
    WARN=_logging.WARNING,
    WARNING=_logging.WARNING,
    ERROR=_logging.ERROR,
    DEBUG=_logging.DEBUG,
    set_verbosity=_log.setLevel,
    info=_log.info,
    warning=_log.warning,
    warn=_log.warning,
    error=_log.error,
    debug=_log.debug,
)

# --- tf.train / tf.python_io ------------------------------------------------------------------------


class _ValueList:
    def __init__(self, value=()):
        self.value = list(value)


class Feature:
    def __init__(self, int64_list=None, float_list=None):
        self.int64_list = int64_list or _ValueList()
        self.float_list = float_list or _ValueList()


class Features:
    def __init__(self, feature):
        self.feature = feature


class Example:
    def __init__(self, features):
        self.features = features

    def SerializeToString(self):  # TF's name
        """One JSON object per example: feature name -> its int64 or float values."""
        out = {}
        for name, feature in self.features.feature.items():
            out[name] = feature.int64_list.value if feature.int64_list.value else feature.float_list.value
        return json.dumps(out, separators=(",", ":"))


train = types.SimpleNamespace(
    Example=Example, Features=Features, Feature=Feature, Int64List=_ValueList, FloatList=_ValueList
)


class TFRecordWriter:
    """Writes each serialized example (a JSON object) as one line."""

    def __init__(self, path):
        self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 (the writer's file, closed by close())

    def write(self, record):
        self._file.write(record + "\n")

    def close(self):
        self._file.close()


python_io = types.SimpleNamespace(TFRecordWriter=TFRecordWriter)
