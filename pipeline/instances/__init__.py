"""Instance stage: tokenized documents -> sentence pairs (the reference algorithm), per bucket.

In: tokenized documents. Out: per-bucket Arrow files of unpadded, masked instances (``schema``).

The algorithm is google-research/bert ``create_instances_from_document`` (``create_pretraining_data.py``).
Entry points, in the order of the data flow:
- ``buckets``: which bucket (NotNext pool, unit of work) a document goes to.
- ``bucket_arrays``: the flat arrays a bucket's documents and instance descriptions live in.
- ``bucket_instances.describe_instances``: every draw of the original, on sentence lengths only.
- ``bucket_rows.assemble_batches``: descriptions -> Arrow rows with numpy (no draws).
- ``bucket_files.make_bucket_instances``: one bucket in, one bucket file out (Beam-free).
- ``common``: what they share (vocab ids, counters, truncation, the per-bucket seed).
"""
