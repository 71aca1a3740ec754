"""bertprep.pipeline: BERT pre-training data (readers, WordPiece, the reference algorithm, Beam, shards).

Never imports torch; the shard format (``schema``) is the contract with ``bertprep.bert_model``.
"""
