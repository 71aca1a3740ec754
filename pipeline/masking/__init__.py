"""Masking stage: which positions an instance predicts and what they become (BERT paper, section 3.1).

In: an instance's word-piece ids (and word starts). Out: ``masked_lm_positions`` / ``masked_lm_ids`` and the
masked ``input_ids``. numpy and the standard library only: ``bert_model`` imports it for dynamic masking.

Entry points:
- ``rule``: the masked-LM rule itself (how many positions, 80% [MASK] / 10% random / 10% kept), in the
  original's exact draw order and a numpy form; the only module that defines those rates.
- ``schemes``: which words the whole-word, n-gram and span schemes choose.
- ``fast``: ``mask_table``, the rule over a whole Arrow table (``--sampling fast``).
- ``exact_draws``: ``random.Random`` shortcuts that reproduce the original's draws with fewer calls.
"""
