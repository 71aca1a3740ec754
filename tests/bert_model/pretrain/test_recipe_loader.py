"""Recipe files read by the library (``pretrain/recipe_files.py``): every key onto its ``TrainConfig`` field, every
value of its field's type (one line naming the file, the key and what is expected), and the shipped recipes as
configs, ``bert-base-paper``'s phases as shares of the run that ``max_steps`` scales."""

from __future__ import annotations

import hashlib

import pytest

from bertprep.bert_model.pretrain.recipe_files import (
    KEY_FIELDS,
    field_of_key,
    find_recipe,
    key_of_field,
    read_recipe,
    shipped_recipes,
)
from bertprep.bert_model.pretrain.train_config import TrainConfig


def _recipe(tmp_path, text: str):
    path = tmp_path / "r.toml"
    path.write_text(text)
    return path


def test_keys_are_option_names_and_map_onto_the_fields(tmp_path):
    path = _recipe(tmp_path, 'lr-schedule = "wsd"\nphase = ["steps=2", "steps=3"]\nlr = 5e-4\nverify = false\n'
                   'model = "runs/a"\nbatch_size = 4\n')  # fmt: skip
    recipe = read_recipe(str(path))
    assert recipe.settings == {
        "lr_schedule": "wsd",
        "phases": ("steps=2", "steps=3"),
        "learning_rate": 5e-4,
        "verify_shards": False,
        "init_from": "runs/a",
        "batch_size": 4,
    }
    assert recipe.keys["phases"] == "phase" and recipe.keys["learning_rate"] == "lr"
    assert recipe.name == str(path) and recipe.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    keys = [key_of_field(f) for f in ("phases", "learning_rate", "verify_shards")]
    assert keys == ["phase", "learning-rate", "verify"]


def test_a_new_config_field_is_a_recipe_key_without_a_table_entry():
    """Generic: every TrainConfig field is read under its name with dashes, and only KEY_FIELDS are spelled
    otherwise."""
    import dataclasses

    for field in dataclasses.fields(TrainConfig):
        assert field_of_key(field.name.replace("_", "-")) == field.name
        assert field_of_key(key_of_field(field.name)) == field.name
    assert set(KEY_FIELDS.values()) <= {f.name for f in dataclasses.fields(TrainConfig)}
    assert field_of_key("config") is None and field_of_key("lr-shedule") is None


@pytest.mark.parametrize(
    "text,message",
    [
        ("batch-size = 8.9", "batch-size = 8.9 is not an integer"),
        ("max-steps = 7.5", "max-steps = 7.5 is not an integer"),
        ("warmup-steps = 1e4", "warmup-steps = 10000.0 is not an integer"),
        ('phase = "steps=3"', 'phase = "steps=3" is not a list of strings (in brackets: ["...", "..."]), one per '
         'repeat of the option: write phase = ["steps=3"]'),
        ("phase = [3]", "phase = [3] is not a list of strings"),
        ("packing = 1", "packing = 1 is not true or false"),
        ("lr-schedule = 3", 'lr-schedule = 3 is not a string (in quotes: "...")'),
        ('learning-rate = "1e-4"', 'learning-rate = "1e-4" is not a number'),
        ("hidden-dropout-prob = true", "hidden-dropout-prob = true is not a number"),
        ("lr-shedule = 1", "unknown key 'lr-shedule': not an option of bertprep train"),
        ("lr = 1e-3\nlearning-rate = 1e-3", "'learning-rate' names an option given before in it"),
        ("lr = ", "is not valid TOML"),
    ],
)  # fmt: skip
def test_a_value_of_the_wrong_type_is_one_line_naming_the_file_the_key_and_the_type(tmp_path, text, message):
    path = _recipe(tmp_path, text + "\n")
    with pytest.raises(ValueError) as caught:
        read_recipe(str(path))
    assert str(caught.value).startswith(str(path)) and message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_whole_numbers_are_numbers_and_optional_fields_take_their_type(tmp_path):
    recipe = read_recipe(str(_recipe(tmp_path, "learning-rate = 1\nmax-time-minutes = 30\ncompile = true\n")))
    assert recipe.settings == {"learning_rate": 1.0, "max_time_minutes": 30.0, "compile": True}
    assert type(recipe.settings["learning_rate"]) is float


def test_every_shipped_recipe_is_a_train_config(tmp_path):
    for name, path in shipped_recipes().items():
        recipe = read_recipe(find_recipe(name))
        assert recipe.name == name and recipe.path == path
        config = recipe.train_config(shards="shards", output_dir=str(tmp_path))
        for field, value in recipe.settings.items():
            assert getattr(config, field) == value, (name, field)


def test_bert_base_paper_s_phases_are_90_and_10_percent_of_any_max_steps(tmp_path):
    """The paper's 90% of 1,000,000 steps at 128 tokens and the rest at 512; a first try of 2 steps or of 1,000
    keeps the shares (1 + 1; 900 + 100) instead of refusing that 900,000 steps exceed the run."""
    recipe = read_recipe(find_recipe("bert-base-paper"))
    paper = recipe.train_config(shards="shards/128", output_dir=str(tmp_path))
    assert paper.max_steps == 1_000_000 and [p["steps"] for p in paper.phase_settings()] == [900_000, 100_000]
    assert paper.for_phase(1).shards == "shards/512" and paper.for_phase(1).batch_size == 8
    for max_steps, steps in [(2, [1, 1]), (1000, [900, 100]), (11, [9, 2])]:
        small = recipe.train_config(shards="s", output_dir=str(tmp_path), max_steps=max_steps, warmup_steps=1)
        assert [p["steps"] for p in small.phase_settings()] == steps


def test_a_recipe_without_shards_asks_for_them(tmp_path):
    recipe = read_recipe(find_recipe("laptop"))
    with pytest.raises(ValueError, match="give shards, output_dir \\(the recipe does not\\)"):
        recipe.train_config()


def test_find_recipe_names_the_shipped_ones(tmp_path):
    with pytest.raises(ValueError, match="'bert-base' is neither a recipe file nor a recipe that ships"):
        find_recipe("bert-base")
    own = _recipe(tmp_path, "batch-size = 4\n")
    assert find_recipe(str(own)) == str(own)
