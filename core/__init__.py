"""The ground floor both halls stand on: what ``pipeline`` and ``bert_model`` share (``core.storage`` first)."""
