"""bertprep.pipeline: BERT pre-training data (readers, WordPiece, the reference algorithm, Beam, shards).

Never imports torch; the shard format (``schema``) is the contract with ``bertprep.bert_model``. ``atomic``
(local files written whole; standard library only) is shared with ``bertprep.bert_model`` too.
"""


def demo_corpus_dir() -> str:
    """Folder of the bundled demo corpus (three public-domain Project Gutenberg books, ~460 KB)."""
    from importlib.resources import files

    return str(files("bertprep.pipeline") / "demo_corpus")
