"""``bertprep train --config NAME|FILE``: recipe files whose keys are the option names, overridden by the command
line, refused when a key is unknown; the recipes that ship with bertprep (package data) are found by name, each
loads and runs, and the wheel carries them."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.bert_model.pretrain.recipe_files import read_recipe, shipped_recipes
from bertprep.cli.main import cli
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
    for folder in ("core", "pipeline", "bert_model", "cli"):
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
    settings = read_recipe(str(recipe)).settings
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


def test_every_train_option_is_read_from_a_recipe_onto_the_field_it_sets():
    """The contract of recipe keys: each long name of each option of train (aliases included) is a recipe key of
    the TrainConfig field the option fills (its parameter's name; --compile's is compile), through the library's
    one mapping (recipe_files.field_of_key), so a new option works in a recipe without a change."""
    import dataclasses

    from bertprep.bert_model.pretrain.recipe_files import field_of_key
    from bertprep.bert_model.pretrain.train_config import TrainConfig

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    command = cli.get_command(None, "train")
    for param in command.params:
        if param.name in ("config", "help"):
            continue
        field = "compile" if param.name == "compile_" else param.name
        assert field in fields, param.name
        names = [*param.opts, *getattr(param, "aliases", ())]
        for name in (n for n in names if n.startswith("--")):
            assert field_of_key(name[2:]) == field, name


@pytest.mark.parametrize(
    "text,message",
    [
        ("batch-size = 8.9", "batch-size = 8.9 is not an integer"),
        ("max-steps = 7.5", "max-steps = 7.5 is not an integer"),
        ('phase = "steps=3"', 'phase = "steps=3" is not a list of strings'),
        ("batch-size = 0", "batch-size = 0: 0 is not in the range x>=1."),
        ('optimizer = "adam"', "optimizer = \"adam\": 'adam' is not one of"),
    ],
)
def test_a_recipe_value_obeys_its_option_s_type_naming_the_file_and_the_key(tiny_shards, tmp_path, text, message):
    """Before, batch-size = 8.9 trained with 8 and max-steps = 7.5 with 7 (the command line refuses both), and
    phase = "steps=3" said only "Value must be an iterable."."""
    recipe = tmp_path / "r.toml"
    recipe.write_text(text + "\n")
    result = _train("--config", recipe, "--shards", tiny_shards / "train", "-o", tmp_path / "out", *TINY)
    assert result.exit_code == 2 and not (tmp_path / "out").exists()
    assert f"{recipe}: {message}" in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_the_log_and_config_toml_say_which_recipe_ran_and_what_the_command_line_overrode(tiny_shards, tmp_path, caplog):
    recipe = tmp_path / "r.toml"
    recipe.write_text("learning-rate = 5e-4\nmax-steps = 9\nweight-decay = 0.02\n")
    sha256 = hashlib.sha256(recipe.read_bytes()).hexdigest()
    with caplog.at_level(logging.INFO, logger="bertprep.train"):
        result = _train("--config", recipe, "--shards", tiny_shards / "train", "-o", tmp_path / "a", *TINY)
    assert result.exit_code == 0, result.output[-2000:]
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("recipe ")]
    assert line == (
        f"recipe {recipe}, sha256 {sha256}: 3 settings; the command line overrode 1: max-steps = 2 (recipe: 9)"
    )
    text = (tmp_path / "a" / "config.toml").read_text()
    assert f"# recipe: {recipe}, sha256 {sha256}\n# overridden on the command line: max-steps\n" in text
    ran = tomllib.loads(text)
    assert ran["learning-rate"] == 5e-4 and ran["weight-decay"] == 0.02 and ran["max-steps"] == 2
    plain = _train("--shards", tiny_shards / "train", "-o", tmp_path / "b", *TINY)
    assert plain.exit_code == 0 and "# recipe" not in (tmp_path / "b" / "config.toml").read_text()


@pytest.mark.slow  # ~3 s on 2 busy cores: two runs of 2 steps, phase 2 of 32 micro-batches
def test_a_shipped_recipe_tried_small_scales_its_phases_with_max_steps(tiny_shards, tmp_path, monkeypatch):
    """train --config bert-base-paper --preset tiny --max-steps 2, as a new user tries it first: the paper's 90%
    / 10% phases come to 1 + 1 steps (before: "the phases' steps add up to 2, not to max_steps (2)"); without the
    recipe's shards/512 the run stops before its first step naming phase 2, with nothing trained."""
    monkeypatch.chdir(tmp_path)
    result = _train("--config", "bert-base-paper", "--shards", tiny_shards / "train", "-o", "missing", *TINY)
    assert result.exit_code == 1 and not (tmp_path / "missing" / "checkpoints").exists()
    # (phase 2 as it runs here: 8 rows a micro-batch, the global batch of 8 on one process)
    assert "Error: phase 2 ('shards=shards/512,batch-size=8,gradient-accumulation-steps=1'): " in result.output
    assert "nothing was trained" in result.output
    shutil.copytree(tiny_shards / "long", tmp_path / "shards" / "512")
    result = _train("--config", "bert-base-paper", "--shards", tiny_shards / "train", "-o", "run", *TINY)
    assert result.exit_code == 0, result.output[-2000:]
    state = json.loads((tmp_path / "run" / "checkpoints" / "step-000002" / "state.json").read_text())
    assert state["phase_steps"] == [1, 1] and state["data"]["max_seq_length"] == 48  # phase 2: shards/512
    shipped = shipped_recipes()["bert-base-paper"]
    sha256 = hashlib.sha256(Path(shipped).read_bytes()).hexdigest()
    header = (tmp_path / "run" / "config.toml").read_text().splitlines()[1:3]
    assert header[0] == f"# recipe: bert-base-paper, sha256 {sha256} ({shipped})"
    overridden = "preset, global-batch-size, batch-size, warmup-steps, max-steps"
    assert header[1] == f"# overridden on the command line: {overridden}"


@pytest.mark.slow  # ~3 s on 2 busy cores: a run stopped after 1 step and resumed
def test_a_resume_with_the_recipe_of_its_phases_is_not_refused(tiny_shards, tmp_path):
    """--config of a recipe with phases, then --resume with the same recipe: its phases equal the checkpoint's
    (JSON's list against click's tuple; before: "--phase ... differs from the checkpoint's")."""
    recipe = tmp_path / "r.toml"
    recipe.write_text(f'phase = ["steps=1", "shards={tiny_shards / "train"}"]\n')
    first = _train("--config", recipe, "--shards", tiny_shards / "train", "-o", tmp_path / "a", *TINY,
                   "--stop-after-steps", "1")  # fmt: skip
    assert first.exit_code == 0, first.output[-2000:]
    again = _train("--config", recipe, "--shards", tiny_shards / "train", "-o", tmp_path / "a", *TINY,
                   "--resume", tmp_path / "a")  # fmt: skip
    assert again.exit_code == 0, again.output[-2000:]
    assert "step 2 (max_steps)" in again.output
