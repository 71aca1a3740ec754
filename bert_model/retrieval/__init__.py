"""Dense retrieval: a bi-encoder fine-tuned with in-batch negatives, and its BEIR-style evaluation.

In: a model bertprep reads (a bertprep run or checkpoint, a Hugging Face BERT, RoBERTa or ModernBERT directory,
a sentence-transformers directory), training pairs (TSV / JSONL ``query``, ``positive`` [, ``negative``], or a
BEIR folder's train qrels) and a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/{split}.tsv``).
Out: a sentence-transformers directory (``SentenceTransformer(DIR)`` and ``bertprep extract-features`` read it),
and ``retrieval.json`` / ``retrieval.md`` with nDCG@10, MRR@10 and Recall@100 as ``pytrec_eval`` computes them.

Entry points: ``data`` (``load_beir``, ``read_pairs``, ``squad_to_beir``), ``encoder`` (bertprep's own encoder
of a retrieval model: ``RetrievalEncoder``, ``exact_search``), ``train`` (``train_bi_encoder``: the
sentence-transformers trainer with ``MultipleNegativesRankingLoss``), ``scoring`` (the metrics through
``pytrec_eval``, TREC run files) and ``evaluate`` (``evaluate_retrieval``: fine-tune, encode, search, score,
resumably); ``config``: the settings of both commands, torch-free (their ``--help``).
"""
