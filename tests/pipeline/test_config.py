"""pipeline/config.py: make-shards' settings, each declared once, and the manifest's view of them."""

from __future__ import annotations

import dataclasses

import pytest

from bertprep.pipeline.config import InstanceConfig, ReadOptions, ShardsConfig
from bertprep.pipeline.masking.config import MaskingConfig


def test_the_manifest_lists_every_instance_and_masking_setting_once_in_its_order():
    config = InstanceConfig(max_seq_length=256, mlm=MaskingConfig(max_predictions_per_seq=40, masked_lm_prob=0.2))
    flat = config.to_dict()
    names = {f.name for f in dataclasses.fields(InstanceConfig)} - {"mlm"}
    names |= {f.name for f in dataclasses.fields(MaskingConfig)}
    assert set(flat) == names and len(flat) == len(names)
    assert list(flat)[:3] == ["max_seq_length", "max_predictions_per_seq", "masked_lm_prob"]  # the original's order
    assert flat["max_predictions_per_seq"] == 40 and flat["masked_lm_prob"] == 0.2 and flat["max_seq_length"] == 256
    assert InstanceConfig.from_flat(**flat) == config  # the command line's and the manifest's flat names
    manifest = ShardsConfig(inputs=("a",), vocab="v", output_dir="o", instance=config).to_dict()
    assert "instance" not in manifest and "mlm" not in manifest and manifest["masked_lm_prob"] == 0.2
    assert manifest["masking"] == "static"  # ShardsConfig's --masking, not the rule's settings


def test_masking_settings_are_checked_where_they_are_declared():
    with pytest.raises(ValueError, match="masked_lm_prob must be in"):
        MaskingConfig(masked_lm_prob=0.0)
    with pytest.raises(ValueError, match="max_predictions_per_seq must be at least 1"):
        MaskingConfig(max_predictions_per_seq=0)
    with pytest.raises(ValueError, match=r"max_predictions_per_seq \(128\) must be smaller than max_seq_length"):
        InstanceConfig(mlm=MaskingConfig(max_predictions_per_seq=128))  # the one check across the two


def test_shards_config_reads_the_readers_defaults():
    config = ShardsConfig(inputs=("a",), vocab="v", output_dir="o")
    for field in dataclasses.fields(ReadOptions):
        assert getattr(config, field.name) == field.default, field.name
