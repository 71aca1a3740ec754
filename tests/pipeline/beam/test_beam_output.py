"""pipeline/beam/output.py: the local runner's worker log records read back and filtered for people."""

from __future__ import annotations

import logging

import pytest
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.local_job_service import BeamFnLoggingServicer

from bertprep.pipeline.beam.output import keep_record, worker_log_entry
from bertprep.pipeline.readers import InputError

Severity = beam_fn_api_pb2.LogEntry.Severity


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def _as_beam_logs_it(**fields) -> logging.LogRecord:
    """The record Beam's own local logging service makes of a worker's log entry."""
    entry = beam_fn_api_pb2.LogEntry(**fields)
    entry.timestamp.seconds = 1700000000
    handler = _Records()
    beam_logger = logging.getLogger("apache_beam.runners.portability.local_job_service")
    old_level, beam_logger.level = beam_logger.level, logging.DEBUG
    beam_logger.addHandler(handler)
    beam_logger.propagate = False  # the root handlers' filters (an earlier make-shards test's) rewrite records
    try:
        BeamFnLoggingServicer().Logging([beam_fn_api_pb2.LogEntry.List(log_entries=[entry])])
    finally:
        beam_logger.propagate = True
        beam_logger.removeHandler(handler)
        beam_logger.setLevel(old_level)
    (record,) = handler.records
    return record


def test_worker_entries_come_back_as_logged():
    message = 'bucket 3: 1,204 documents — "Über" 力\nsecond line\twith a tab and a \\ backslash'
    record = _as_beam_logs_it(
        severity=Severity.WARN,
        message=message,
        log_location="bertprep.pipeline.beam.transforms:88",
        trace="Traceback (most recent call last):\n  ...",
        instruction_id="bundle_7",
    )
    assert record.levelno == logging.WARNING
    entry = worker_log_entry(record)
    assert entry["message"] == message
    assert entry["log_location"] == "bertprep.pipeline.beam.transforms:88"
    assert entry["trace"].startswith("Traceback (most recent call last):\n")
    assert keep_record(record) and record.getMessage() == message  # shown as the bare message


def test_records_of_this_process_are_not_worker_entries():
    record = logging.LogRecord("bertprep", logging.INFO, __file__, 1, "Worker: %s said", ("x",), None)
    assert worker_log_entry(record) is None and keep_record(record)


@pytest.mark.parametrize("quiet", [False, True])
def test_what_is_shown(quiet):
    def shown(**fields) -> bool:
        return keep_record(_as_beam_logs_it(**fields), quiet=quiet)

    ours = "bertprep.pipeline.beam.transforms:10"
    assert shown(severity=Severity.INFO, message="read 3 files", log_location=ours) is not quiet
    assert shown(severity=Severity.WARN, message="a.txt:3: undecodable bytes", log_location=ours)
    assert not shown(severity=Severity.INFO, message="Creating state cache", log_location="apache_beam.runners:1")
    assert not shown(
        severity=Severity.WARN, message="Discarding unparseable args", log_location="apache_beam.options:1"
    )
    assert (
        shown(
            severity=Severity.ERROR, message="Error processing instruction", log_location="apache_beam.runners.worker:1"
        )
        is not quiet
    )
    # the traceback of an error make-shards reports in one line itself
    assert not shown(
        severity=Severity.ERROR,
        message="Error processing instruction bundle_3",
        trace="Traceback ...\nbertprep.pipeline.readers.base.InputError: a.txt:1: not a JSON object",
        log_location="apache_beam.runners.worker:1",
    )
    hint = logging.LogRecord("apache_beam", logging.INFO, __file__, 1, "Converting string literal type hint", (), None)
    assert not keep_record(hint, quiet=quiet)


def test_the_in_process_runners_copy_of_a_user_error_is_dropped():
    try:
        try:
            raise InputError("a.txt:1: not a JSON object")
        except InputError as err:
            raise RuntimeError("bundle failed") from err
    except RuntimeError as err:
        record = logging.LogRecord("apache_beam", logging.ERROR, __file__, 1, "failed", (), (RuntimeError, err, None))
    assert not keep_record(record)
