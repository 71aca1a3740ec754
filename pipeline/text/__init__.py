"""Text stage: sentences -> word-piece ids (and the vocab they are looked up in).

In: the sentences of a document (``readers``). Out: ``int32`` word-piece ids per sentence, optionally with
word starts for the word-level masking schemes.

Entry points (the sentence segmenters are the readers': ``readers/segmentation.py``):
- ``tokenization``: ``TokenizerFn`` side of ``make-shards``: the original generator's ``FullTokenizer``
  (google-research/bert ``tokenization.py``) through Hugging Face ``tokenizers``.
- ``word_segmentation``: word boundaries for scripts without spaces (jieba, Kiwi, a user callable).
- ``vocab``: ``build-vocab``, a WordPiece vocab trained with ``tokenizers``' ``WordPieceTrainer``.
- ``vocab_extension``: ``build-vocab --extend``, an existing vocab plus the corpus's pieces that save the most.
"""
