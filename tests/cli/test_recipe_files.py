"""``bertprep train --config NAME|FILE``: recipe files whose keys are the option names, overridden by the command
line, refused when a key is unknown; the recipes that ship with bertprep (package data) are found by name, each
loads and runs, and the wheel carries them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.cli.options import read_recipe, shipped_recipes
from conftest import REPO_ROOT, need_module

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RECIPES = sorted((REPO_ROOT / "bert_model" / "pretrain" / "recipes").glob("*.toml"))
#: What makes any recipe a 2-step run of the tiny preset on the tiny shards (the command line overrides it).
TINY = [
    *("--preset tiny --hidden-size 32 --num-attention-heads 2 --intermediate-size 64 --max-steps 2").split(),
    *("--warmup-steps 1 --warmup-tokens 0 --batch-size 4 --global-batch-size 8 --batch-size-warmup-tokens 0").split(),
    *("--num-workers 0 --shuffle-buffer-size 16 --save-every 0 --precision fp32 --device cpu --no-progress").split(),
]


def _train(*args: str):
    return CliRunner().invoke(cli, ["train", *map(str, args)])


def test_every_shipped_recipe_is_there():
    names = {p.stem for p in RECIPES}
    assert {"bert-base-paper", "bert-large-nvidia-lamb", "roberta-base", "modernbert-base", "laptop"} <= names


def test_the_installed_package_finds_every_recipe_by_name():
    """importlib.resources on the installed bertprep: each recipe of the source tree, by its name, the same bytes."""
    shipped = shipped_recipes()
    assert sorted(shipped) == sorted(p.stem for p in RECIPES)
    for recipe in RECIPES:
        assert Path(shipped[recipe.stem]).read_bytes() == recipe.read_bytes()


def test_the_wheel_and_the_sdist_carry_every_recipe(tmp_path):
    """The wheel and the sdist built from the project hold each recipe where importlib.resources finds it, so
    that `pip install bertprep` users have `--config NAME` too."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("setup.py", "setup.cfg", "README.md", "LICENSE"):
        shutil.copy2(REPO_ROOT / name, project / name)
    for folder in ("pipeline", "bert_model", "cli"):
        shutil.copytree(REPO_ROOT / folder, project / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    subprocess.run([*build, "-w", str(tmp_path / "dist"), str(project)], check=True, capture_output=True)
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")], cwd=project,
                   check=True, capture_output=True)  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("bertprep-*.whl")
    (sdist,) = (tmp_path / "dist").glob("bertprep-*.tar.gz")
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    with tarfile.open(sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for recipe in RECIPES:
        assert f"bertprep/bert_model/pretrain/recipes/{recipe.name}" in in_wheel
        assert f"bert_model/pretrain/recipes/{recipe.name}" in in_sdist


def test_a_config_that_is_neither_a_file_nor_a_shipped_name_is_refused_naming_the_shipped_ones(tmp_path):
    result = _train("--config", "bert-base", "--shards", tmp_path, "-o", tmp_path / "a")
    assert result.exit_code == 2
    assert "'bert-base' is neither a recipe file nor a recipe that ships with bertprep" in result.output
    assert "bert-base-paper, bert-large-nvidia-lamb" in result.output
    result = _train("--config", tmp_path / "missing.toml", "--shards", tmp_path, "-o", tmp_path / "a")
    assert result.exit_code == 2 and f"recipe file {tmp_path / 'missing.toml'} does not exist" in result.output


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_loads_and_runs_two_steps_on_the_tiny_preset(tiny_shards, tmp_path, recipe):
    settings = read_recipe(str(recipe), cli.get_command(None, "train"))
    assert settings and "learning_rate" in settings and "max_steps" in settings
    module = {"stable-adamw": "optimi"}.get(settings.get("optimizer"))
    if module:
        need_module(module)
    shards = tiny_shards / ("dynamic" if settings.get("masked_lm_prob") else "train")
    out = tmp_path / "run"
    later = shards if settings.get("masked_lm_prob") else tiny_shards / "long"  # (a masking rate: dynamic shards)
    phases = ["--phase", "steps=1", "--phase", f"shards={later}"] if settings.get("phases") else []
    result = _train("--config", recipe.stem, "--shards", shards, "-o", out, *TINY, *phases)  # (by its name)
    assert result.exit_code == 0, result.output[-2000:]
    ran = tomllib.loads((out / "config.toml").read_text())
    assert ran["max-steps"] == 2 and ran["preset"] == "tiny"  # the command line's
    assert ran["learning-rate"] == settings["learning_rate"]  # the recipe's
    assert ran["optimizer"] == settings.get("optimizer", "adamw")


def test_the_command_line_overrides_the_file_and_config_toml_repeats_the_run(tiny_shards, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('lr-schedule = "wsd"\nlearning-rate = 5e-4\nlr = 5e-4\n')
    result = _train("--config", recipe, "--shards", tiny_shards / "train", "-o", tmp_path / "a", *TINY)
    assert result.exit_code == 2 and f"{recipe}: 'lr' names an option given before in it" in result.output
    recipe.write_text('lr-schedule = "wsd"\nlearning-rate = 5e-4\ndecay-steps = 1\n')
    result = _train("--config", recipe, "--shards", tiny_shards / "train", "-o", tmp_path / "a", *TINY, "--lr", "2e-4")
    assert result.exit_code == 0, result.output[-2000:]
    ran = tomllib.loads((tmp_path / "a" / "config.toml").read_text())
    assert ran["learning-rate"] == 2e-4 and ran["lr-schedule"] == "wsd" and ran["decay-steps"] == 1
    assert "eval-shards" not in ran and "# eval-shards: not set" in (tmp_path / "a" / "config.toml").read_text()
    # The written file is a recipe itself: --config of it (another output directory) runs the same settings.
    again = tmp_path / "again.toml"
    again.write_text((tmp_path / "a" / "config.toml").read_text().replace(str(tmp_path / "a"), str(tmp_path / "b")))
    result = _train("--config", again)
    assert result.exit_code == 0, result.output[-2000:]
    assert tomllib.loads((tmp_path / "b" / "config.toml").read_text())["learning-rate"] == 2e-4


def test_an_unknown_key_is_refused_naming_the_key_and_the_file(tiny_shards, tmp_path):
    recipe = tmp_path / "typo.toml"
    recipe.write_text('lr-shedule = "wsd"\n')
    result = _train("--config", recipe, "--shards", tiny_shards / "train", "-o", tmp_path / "out")
    assert result.exit_code == 2
    assert f"{recipe}: unknown key 'lr-shedule': not an option of bertprep train" in result.output
    assert not (tmp_path / "out").exists()
    recipe.write_text("lr-schedule = \n")
    result = _train("--config", recipe, "--shards", tiny_shards / "train", "-o", tmp_path / "out")
    assert result.exit_code == 2 and f"{recipe} is not valid TOML" in result.output


def test_a_missing_optimizer_package_is_refused_before_any_work(tiny_shards, tmp_path, monkeypatch):
    import importlib

    real = importlib.import_module

    def without(name, *args):
        if name == "optimi":
            raise ModuleNotFoundError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without)
    result = _train("--optimizer", "stable-adamw", "--shards", tiny_shards / "train", "-o", tmp_path / "out")
    assert result.exit_code == 2 and not (tmp_path / "out").exists()
    assert "Invalid value for '--optimizer': needs the torch-optimi package: pip install " in result.output


def test_phases_in_tokens_without_max_steps_train_for_their_sum(tiny_shards, tmp_path):
    """--phase tokens=... twice and no --max-steps: 600 token slots at 4 x 2 x 32 = 256 a step are 3 steps
    (2.3, rounded up), 500 at 4 x 2 x 48 = 384 are 2 (1.3); the run takes 5, its config.toml records the phases as
    given and max-steps 0 (the sum), and --config of it runs the same."""
    at = TINY.index("--max-steps")
    tiny = TINY[:at] + TINY[at + 2 :]
    phases = ["--phase", "tokens=600", "--phase", f"tokens=500,shards={tiny_shards / 'long'}"]
    result = _train("--shards", tiny_shards / "train", "-o", tmp_path / "a", *tiny, *phases)
    assert result.exit_code == 0, result.output[-2000:]
    assert "step 5 (max_steps)" in result.output
    ran = tomllib.loads((tmp_path / "a" / "config.toml").read_text())
    assert ran["max-steps"] == 0 and ran["phase"] == ["tokens=600", f"tokens=500,shards={tiny_shards / 'long'}"]
    again = _train("--config", tmp_path / "a" / "config.toml", "-o", tmp_path / "b")
    assert again.exit_code == 0 and "step 5 (max_steps)" in again.output, again.output[-2000:]


def test_max_steps_that_disagrees_with_phases_in_tokens_is_refused_naming_each_phase(tiny_shards, tmp_path):
    phases = ["--phase", "tokens=600", "--phase", f"tokens=500,shards={tiny_shards / 'long'}"]
    result = _train("--shards", tiny_shards / "train", "-o", tmp_path / "a", *TINY, *phases)
    assert result.exit_code == 1
    assert (
        "the phases come to 5 steps (phase 1: tokens=600 / 256 token slots a step = 3 steps; phase 2: tokens=500 / "
        "384 token slots a step = 2 steps), not max_steps (2); leave --max-steps out" in result.output
    )
