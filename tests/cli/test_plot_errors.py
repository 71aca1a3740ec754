"""``plot`` and ``train --resume`` on a damaged ``metrics.jsonl``, and ``plot -o`` into a folder that does not
exist: one line each, naming the file (before: a JSON decoder's message naming no file, or 49 lines of
traceback from matplotlib)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.bert_model.metrics import JsonlWriter, read_jsonl
from bertprep.cli.main import cli


def _run(tmp_path: Path, tail: str = "") -> Path:
    """A run folder whose metrics.jsonl has 4 training lines, 1 evaluation and ``tail`` appended."""
    run = tmp_path / "run"
    run.mkdir()
    lines = [
        {"step": s, "split": "train", "loss": 5.0 - s, "tokens_seen": 100 * s, "elapsed_s": float(s)}
        for s in range(1, 5)
    ]
    lines.append({"step": 4, "split": "eval", "loss": 1.5, "mlm_accuracy_at_mask": 0.2})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + tail)
    return run


def _one_error_line(result) -> str:
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


def test_plot_skips_a_torn_last_line_with_a_warning_naming_the_file(tmp_path, caplog):
    run = _run(tmp_path, tail='{"step": 5, "split": "train", "loss": 0.7, "mlm_acc')
    with caplog.at_level("WARNING"):
        result = CliRunner().invoke(cli, ["plot", str(run), "-o", str(tmp_path / "c.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "c.png").stat().st_size > 0
    assert any(str(run / "metrics.jsonl") in r.getMessage() and "cut short" in r.getMessage() for r in caplog.records)


def test_plot_refuses_damage_inside_the_file_naming_file_and_line(tmp_path):
    run = _run(tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines[1] = lines[1][:20] + "\n"
    (run / "metrics.jsonl").write_text("".join(lines))
    line = _one_error_line(CliRunner().invoke(cli, ["plot", str(run), "-o", str(tmp_path / "c.png")]))
    assert f"{run / 'metrics.jsonl'}, line 2: not a JSON record" in line
    assert not (tmp_path / "c.png").exists()


def test_plot_into_a_missing_folder_is_one_line(tmp_path):
    run = _run(tmp_path)
    out = tmp_path / "missing" / "dir" / "x.png"
    line = _one_error_line(CliRunner().invoke(cli, ["plot", str(run), "-o", str(out)]))
    assert str(tmp_path / "missing" / "dir") in line and "create it" in line


def test_resume_rewrites_metrics_without_the_torn_last_line(tmp_path, caplog):
    run = _run(tmp_path, tail='{"step": 5, "split": "tr')
    with caplog.at_level("WARNING"):
        JsonlWriter(str(run / "metrics.jsonl"), truncate_after_step=3).close()
    assert [r["step"] for r in read_jsonl(str(run / "metrics.jsonl"))] == [1, 2, 3]
    assert (run / "metrics.jsonl").read_text().endswith("}\n")
    assert any("cut short" in r.getMessage() for r in caplog.records)


def test_a_resume_with_damage_inside_metrics_is_refused_naming_file_and_line(tmp_path):
    run = _run(tmp_path)
    text = (run / "metrics.jsonl").read_text().replace('"split": "eval"', '"split" "eval"')
    (run / "metrics.jsonl").write_text(text)
    with pytest.raises(ValueError, match=r"metrics.jsonl, line 5: not a JSON record"):
        JsonlWriter(str(run / "metrics.jsonl"), truncate_after_step=3)
