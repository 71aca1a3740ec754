"""``inspect``'s statistics view shows what the shards were made with."""

from __future__ import annotations

from bertprep.pipeline.shards.inspection import _shown_config_value


def test_dupe_factor_shown_is_the_one_the_shards_were_made_with():
    """Round two: dynamic-masking shards (made in one pass) showed the requested dupe_factor=10."""
    assert _shown_config_value({"masking": "dynamic", "dupe_factor": 10}, "dupe_factor") == (
        "1 (dynamic masking; 10 requested)"
    )
    assert _shown_config_value({"masking": "dynamic", "dupe_factor": 1}, "dupe_factor") == "1"
    assert _shown_config_value({"masking": "static", "dupe_factor": 10}, "dupe_factor") == "10"
    assert _shown_config_value({"dupe_factor": 5}, "dupe_factor") == "5"  # manifests before --masking
