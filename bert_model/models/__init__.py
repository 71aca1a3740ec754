"""The encoders and their heads: BERT (``bert.py``, ``bert_config.py``) and ModernBERT (``modernbert.py``,
``modernbert_config.py``), the fine-tuning heads (``heads.py``) and what they return (``outputs.py``), and the
batch layouts they take (``packing.py``: padded, packed, unpadded).

In: token ids as int tensors (padded ``(B, T)`` with ``attention_mask``; packed ``(B, T)`` with
``sequence_ids`` / ``position_ids``). Out: hidden states, logits and losses, with Hugging Face ``transformers``
parameter names so that state dicts map one to one. Entry points: ``bert.BertForPreTraining``,
``modernbert.ModernBertForMaskedLM``, ``heads.HEADS``. Plain ``nn.Module`` code: no training loop, no files.
"""
