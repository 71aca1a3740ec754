"""A bucket held as arrays (``pipeline/instances/bucket_arrays.py``): the documents' flat ``uint32`` ids and offsets,
and the checks on their sentence lengths."""

from __future__ import annotations

import numpy as np
import pytest

from bertprep.pipeline.instances.bucket_arrays import BucketDocuments


def test_bucket_documents_are_flat_uint32_and_checked():
    docs = BucketDocuments.from_lists([[[5, 6], [7]], [], [[70000, 9, 9]]])
    assert docs.ids.dtype == np.uint32 and docs.ids.tolist() == [5, 6, 7, 70000, 9, 9]
    assert docs.sentence_lengths == [[2, 1], [], [3]] and docs.doc_starts == [0, 3, 3]
    with pytest.raises(ValueError, match="add up"):
        BucketDocuments.from_arrays([(np.array([1, 2, 3]), [1, 1])])
    with pytest.raises(ValueError, match="positive"):
        BucketDocuments.from_arrays([(np.array([1, 2]), [2, 0])])
