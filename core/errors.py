"""The ground floor's user-facing error of a vocab, apart from the vocab code so that a module can name it (make-shards'
``pipeline/errors.py`` lists it among the errors whose message is for the user) without importing ``tokenizers``.
Standard library only.
"""

from __future__ import annotations


class VocabError(ValueError):
    """A vocab file that cannot be used; the message names the file and what to do. ``option`` is the
    command-line option at fault when the vocab is fine but an option contradicts it (``--no-do-lower-case``
    for an uncased tokenizer.json), else None."""

    def __init__(self, message: str, option: str | None = None):
        super().__init__(message)
        self.option = option


__all__ = ["VocabError"]
