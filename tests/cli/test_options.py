"""cli/options.py: every command shows its library dataclass's defaults (``dataclass_default``), never a copy."""

from __future__ import annotations

import dataclasses

import pytest

from bertprep.cli.options import dataclass_default
from conftest import need_module


@dataclasses.dataclass
class _Base:
    shared: int = 1
    shadowed: str = "base"


@dataclasses.dataclass
class _Config:
    required: str
    shadowed: str = "config"
    listed: list = dataclasses.field(default_factory=list)


def test_dataclass_default_reads_the_first_class_that_declares_the_field():
    default = dataclass_default(_Config, _Base)
    assert default("shadowed") == "config" and default("shared") == 1
    for name in ("required", "listed", "missing"):  # no plain default: a command cannot show one
        with pytest.raises(KeyError):
            default(name)


@pytest.mark.parametrize(
    "module, command, config",
    [
        ("bertprep.cli.train", "train", "bertprep.bert_model.pretrain.train_config:TrainConfig"),
        ("bertprep.cli.finetune", "finetune", "bertprep.bert_model.tasks.finetune:FinetuneConfig"),
        ("bertprep.cli.predict", "predict", "bertprep.bert_model.tasks.predict:PredictConfig"),
        ("bertprep.cli.fill_mask", "fill_mask", "bertprep.bert_model.inference.fill_mask:FillMaskConfig"),
        (
            "bertprep.cli.extract_features",
            "extract_features_cmd",
            "bertprep.bert_model.inference.features:FeatureConfig",
        ),
    ],
)
def test_model_commands_show_their_configs_defaults(module, command, config):
    need_module("torch")
    import importlib

    params = {p.name: p for p in getattr(importlib.import_module(module), command).params}
    config_module, config_name = config.split(":")
    fields = {
        f.name: f.default
        for f in dataclasses.fields(getattr(importlib.import_module(config_module), config_name))
        if f.default is not dataclasses.MISSING
    }
    shared = sorted(n for n in params if n in fields and isinstance(params[n].default, (int, float, str)))
    assert "device" in shared, shared  # every model command's --device is DeviceConfig's
    for name in shared:
        assert params[name].default == fields[name], name
