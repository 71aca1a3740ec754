"""Training logs in the tools people watch: ``--report-to none|tensorboard|wandb`` of ``train`` and ``finetune``.

Both loops write each metrics record (a dict with ``step``, ``split`` = ``train`` or ``eval``, and figures) to
a :class:`MetricsLog`: the record goes to ``metrics.jsonl`` unchanged and, as scalars, to the reporter. A
scalar's name is the record's ``split`` and field name, ``train/loss``, ``eval/mlm_accuracy_at_mask``,
``train/lr`` ... (the names of ``metrics.jsonl``, grouped as Hugging Face ``Trainer`` groups them), at the
record's ``step``; every numeric field is reported, so a field the loop adds reaches the reporter by itself.
``None`` (e.g. NSP accuracy without a sentence task), text and booleans are left out.

- ``tensorboard``: event files in ``OUTPUT/tensorboard/`` (``torch.utils.tensorboard.SummaryWriter``, from the
  ``tensorboard`` package: ``pip install 'bertprep[tensorboard]'``); ``tensorboard --logdir runs/`` shows every
  run under ``runs/``. A resumed run drops the events logged after its checkpoint, as ``metrics.jsonl`` does.
- ``wandb``: a Weights & Biases run (``pip install 'bertprep[wandb]'``) named after the output directory, in
  project ``bertprep`` unless ``WANDB_PROJECT`` says otherwise, files in ``OUTPUT/wandb/``, the run's settings
  as its config. W&B's own variables apply (``WANDB_MODE=offline`` writes the run locally and ``wandb sync``
  uploads it later; ``WANDB_ENTITY``, ``WANDB_NAME``, ...). Each invocation is a W&B run of its own, a
  ``--resume`` too (W&B refuses steps lower than a run's last, which a resumed run logs again).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any, Protocol

#: ``--report-to`` values.
REPORT_TO = ("none", "tensorboard", "wandb")
#: The package each reporter needs and the bertprep extra that installs it.
_PACKAGES = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb")}
#: Where each reporter writes in the output directory.
REPORT_DIRS = {"tensorboard": "tensorboard", "wandb": "wandb"}


def scalars(record: dict[str, Any]) -> tuple[int, dict[str, float]]:
    """``(step, {"<split>/<field>": value})`` of a metrics record: every int or float field except ``step``
    (booleans, text and ``None`` left out; NaN and infinities kept, as the record has them).

    Raises:
        KeyError: the record has no ``step``.
    """
    split = record.get("split", "train")
    values = {
        f"{split}/{key}": float(value)
        for key, value in record.items()
        if key not in ("step", "split") and isinstance(value, (int, float)) and not isinstance(value, bool)
    }
    return int(record["step"]), values


def report_to_unavailable(report_to: str) -> str | None:
    """Why ``--report-to report_to`` cannot run here (its package is not importable), or None when it can.
    Asked before any work starts, so that a missing package is not found after hours of training."""
    if report_to not in _PACKAGES:
        return None
    module, extra = _PACKAGES[report_to]
    try:
        __import__(module)
    except ImportError:
        return (
            f"--report-to {report_to} needs the package {module!r}, which is not installed "
            f"(pip install 'bertprep[{extra}]')"
        )
    return None


class Reporter(Protocol):
    def log(self, step: int, values: dict[str, float]) -> None: ...

    def close(self, failed: bool = False) -> None: ...


class TensorBoardReporter:
    """Scalars as TensorBoard event files in ``log_dir``; ``purge_step`` hides the events a resumed run's
    previous invocation logged at or after it (TensorBoard's own mechanism)."""

    def __init__(self, log_dir: str, purge_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=log_dir, purge_step=purge_step)

    def log(self, step: int, values: dict[str, float]) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()  # a killed run keeps what it logged, as metrics.jsonl does

    def close(self, failed: bool = False) -> None:
        self.writer.close()


#: Seconds ``wandb.init`` waits for the W&B server before the run is refused (W&B's own default, 90, then
#: retries: 104 s before a traceback); W&B's ``WANDB_INIT_TIMEOUT`` overrides it. With the account query left out
#: (below), a server that does not answer is reported about a second after this.
WANDB_INIT_TIMEOUT_S = 30.0

logger = logging.getLogger("bertprep.report")


class WandbReporter:
    """Scalars in a Weights & Biases run (``wandb.init`` / ``run.log(values, step=step)`` / ``run.finish``).

    W&B's own terminal lines are off (its ``silent`` setting; its logs stay in ``OUTPUT/wandb/``): the run is
    announced in one line of bertprep's (its name and page, or where an offline run is kept), and a run that
    cannot start is one ``ValueError``. The account query that W&B makes only to greet the user
    (``x_disable_viewer``) is left out: against a server that does not answer it cost 10 s more (two 5 s tries)
    before the init timeout started.

    Raises:
        ValueError: W&B could not start the run (no API key, a server that does not answer within
            :data:`WANDB_INIT_TIMEOUT_S`): one line naming the cause, ``--report-to none`` and ``WANDB_MODE=offline``.
    """

    def __init__(self, output_dir: str, job_type: str, config: dict[str, Any]):
        import wandb

        os.makedirs(os.path.join(output_dir, REPORT_DIRS["wandb"]), exist_ok=True)
        timeout: dict[str, Any] = {} if os.environ.get("WANDB_INIT_TIMEOUT") else {"init_timeout": WANDB_INIT_TIMEOUT_S}
        try:
            wandb.setup(settings=wandb.Settings(silent=True, x_disable_viewer=True))  # (the login's lines, its query)
            self.run = wandb.init(
                project=os.environ.get("WANDB_PROJECT", "bertprep"),
                name=os.environ.get("WANDB_NAME", os.path.basename(os.path.abspath(output_dir))),
                dir=output_dir,  # W&B writes its files in dir/wandb/
                job_type=job_type,
                config=config,
                settings=wandb.Settings(silent=True, x_disable_viewer=True, **timeout),
            )
        except (wandb.errors.Error, OSError, TimeoutError) as err:
            with contextlib.suppress(Exception):
                wandb.teardown()  # (its service process ends with the failed run)
            cause = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise ValueError(
                f"--report-to wandb: W&B could not start a run ({cause}); log in (wandb login, or WANDB_API_KEY), "
                f"or train without it: --report-to none, or WANDB_MODE=offline to keep the run in "
                f"{os.path.join(output_dir, REPORT_DIRS['wandb'])} and upload it later with wandb sync"
            ) from None
        where = self.run.url or f"offline, in {self.run.dir}; wandb sync uploads it"
        logger.info("W&B run %s: %s", self.run.name, where)

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def close(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)


def open_reporter(
    report_to: str, output_dir: str, *, job_type: str, config: dict[str, Any], resume_step: int | None = None
) -> Reporter | None:
    """The reporter ``report_to`` names, writing for the run in ``output_dir`` (None for ``none``).
    ``resume_step``: the checkpoint's step when the run resumes (later events of the stopped run are hidden).

    Raises:
        ValueError: an unknown ``report_to``, its package is not installed (the message says what to install),
            ``OUTPUT/tensorboard`` or ``OUTPUT/wandb`` is a file, or W&B could not start a run (``WandbReporter``).
    """
    if report_to not in REPORT_TO:
        raise ValueError(f"unknown report_to {report_to!r}; choose one of {', '.join(REPORT_TO)}")
    problem = report_to_unavailable(report_to)
    if problem:
        raise ValueError(problem)
    folder = os.path.join(output_dir, REPORT_DIRS.get(report_to, ""))
    if report_to in REPORT_DIRS and os.path.exists(folder) and not os.path.isdir(folder):
        raise ValueError(
            f"{folder} is a file, but --report-to {report_to} writes its files in a folder of that name; move the "
            "file away, or use --report-to none"
        )
    if report_to == "tensorboard":
        purge = None if resume_step is None else resume_step + 1
        return TensorBoardReporter(os.path.join(output_dir, REPORT_DIRS["tensorboard"]), purge_step=purge)
    if report_to == "wandb":
        return WandbReporter(output_dir, job_type, config)
    return None


class ConsoleReporter:
    """One line per training record on stderr (``step 10/40: loss 4.1234, mlm_accuracy 0.1234, ...``), for runs
    without a progress bar (``--no-progress``), which would otherwise print nothing until their first
    evaluation. Evaluation records are left to the loop, which prints them itself."""

    FIELDS = ("loss", "mlm_accuracy", "mlm_accuracy_at_mask", "nsp_accuracy", "lr", "tokens_per_s")

    def __init__(self, max_steps: int | None = None, stream: Any = None):
        self.max_steps = max_steps
        self.stream = stream

    def log(self, step: int, values: dict[str, float]) -> None:
        shown = [(f, values[f"train/{f}"]) for f in self.FIELDS if f"train/{f}" in values]
        if not shown:
            return
        of = f"/{self.max_steps}" if self.max_steps else ""
        text = ", ".join(
            f"{f} {v:.3g}" if f == "lr" else f"{f} {v:,.0f}" if f == "tokens_per_s" else f"{f} {v:.4f}"
            for f, v in shown
        )
        print(f"step {step}{of}: {text}", file=self.stream or sys.stderr, flush=True)

    def close(self, failed: bool = False) -> None:
        pass


class MetricsLog:
    """What a loop writes its metrics records to: ``metrics.jsonl`` (a ``metrics.JsonlWriter``) and the
    reporters (``None`` entries are skipped). ``close`` closes them all, once; as a context manager it closes on
    an exception too (a W&B run is then marked failed)."""

    def __init__(self, jsonl: Any, *reporters: Reporter | None):
        self.jsonl = jsonl
        self.reporters = [r for r in reporters if r is not None]
        self._closed = False

    def write(self, record: dict[str, Any]) -> None:
        self.jsonl.write(record)
        if self.reporters:
            step, values = scalars(record)
            for reporter in self.reporters:
                reporter.log(step, values)

    def close(self, failed: bool = False) -> None:
        if self._closed:
            return
        self._closed = True
        self.jsonl.close()
        for reporter in self.reporters:
            reporter.close(failed=failed)

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(failed=exc_type is not None)
