"""Inference with a pre-trained encoder: ``bertprep fill-mask`` and ``bertprep extract-features``.

In: a model (bertprep run or HF directory) and text. Out: top-k fillers for ``[MASK]``; per-piece hidden
states of chosen layers as an Arrow file (BERT paper, section 5.3). ``tasks.feature_based`` builds on
``features``. Their settings (``FeatureConfig``, ``FillMaskConfig``) are ``config``'s, torch-free (the commands'
``--help``).
"""
