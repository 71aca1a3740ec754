"""Hugging Face interop: ``transformers`` directories in and out.

In: a Hugging Face model directory (``config.json``, ``model.safetensors``, tokenizer files) or a bertprep
run. Out: bertprep models started from HF weights, or HF directories that ``AutoModel*`` loads.

Entry points: ``interop`` (load a HF directory, map its config and weights), ``export`` (write one).
"""
