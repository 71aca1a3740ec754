"""The ``bert`` format (``readers/text.py`` ``read_bert``): the original generator's line rules."""

from __future__ import annotations

from readers_factory import BERT_EDGE, read_all, reference_bert_documents


def test_bert_format_matches_the_reference_line_rules(tmp_path):
    path = tmp_path / "edge.txt"
    path.write_bytes(BERT_EDGE.encode("utf-8"))
    docs, stats = read_all(path, "bert")
    assert [d.sentences for d in docs] == reference_bert_documents(path)
    assert docs[0].sentences == [
        "\ufeffFirst sentence.",  # the reference keeps a BOM (not whitespace); its tokenizer deletes it
        "Has a\rcarriage return and a \x0bvertical tab.",
        "Has a\u2028line separator and \x1c file separator.",
    ]
    assert [d.line for d in docs] == [1, 5, 8, 10]
    assert [d.ordinal for d in docs] == [0, 1, 2, 3]
    assert all(d.source == str(path) for d in docs)
    assert stats.skipped_documents == {"empty": 1}
    assert stats.one_sentence_documents == 2
    assert (stats.documents, stats.sentences, stats.bytes) == (4, 7, len(BERT_EDGE.encode("utf-8")))


def test_bert_format_on_the_golden_inputs_equals_the_reference_reading(shared_data):
    paths = [shared_data / "samples" / "sample_text.txt", *sorted((shared_data / "golden").glob("*.txt"))]
    for path in paths:
        docs, stats = read_all(path)
        assert stats.formats == {"bert": 1}, path
        assert [d.sentences for d in docs] == reference_bert_documents(path), path
    docs, _ = read_all(shared_data / "samples" / "sample_text.txt")
    assert [len(d.sentences) for d in docs] == [3, 13, 15]  # 3 documents, 31 non-blank lines (counted with awk)
