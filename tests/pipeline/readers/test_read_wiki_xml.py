"""MediaWiki XML dumps (``readers/wiki.py`` ``read_wiki_xml``): article text without markup, redirects and other
namespaces skipped, multistream bz2."""

from __future__ import annotations

import bz2

import pytest

from bertprep.pipeline import readers
from bertprep.pipeline.readers import InputError, detect_format, read_documents
from readers_factory import FIXTURES, read_all

TINY_DUMP = FIXTURES / "pages-articles-tiny.xml"


def test_wiki_xml_keeps_article_text_and_skips_redirects_other_namespaces_and_markup():
    docs, stats = read_all(TINY_DUMP)
    assert stats.formats == {"wiki-xml": 1}
    assert [d.sentences for d in docs] == [
        [
            "Tea is an aromatic beverage made from the leaves of Camellia sinensis.",
            "It is drunk hot or cold.",
            "Tea drinking began in China in the 3rd century AD.",
            "Mr. Smith says it is older.",
            "The last paragraph mentions entities and an external link.",
        ],
        ["A kettle boils water."],
    ]
    assert [(d.ordinal, d.line) for d in docs] == [(0, 0), (1, 0)]
    # Chai is a redirect, Talk:Tea is namespace 1, the disambiguation page is only a list.
    assert stats.skipped_documents == {"redirect": 1, "namespace": 1, "empty": 1}
    assert stats.bytes == TINY_DUMP.stat().st_size


def test_wiki_xml_multistream_bz2_is_read_whole(tmp_path):
    # pages-articles-multistream dumps are concatenated bz2 streams; every stream must be read.
    data = TINY_DUMP.read_bytes()
    cut = data.index(b"  <page>\n    <title>Kettle")
    path = tmp_path / "enwiki-pages-articles-multistream.xml.bz2"
    path.write_bytes(bz2.compress(data[:cut]) + bz2.compress(data[cut:]))
    assert detect_format(str(path)) == "wiki-xml"
    docs, _ = read_all(path)
    assert [d.sentences[-1] for d in docs] == [
        "The last paragraph mentions entities and an external link.",
        "A kettle boils water.",
    ]


def test_wiki_xml_real_dump_has_no_markup_left(shared_data):
    path = shared_data / "wikipedia" / "enwiki-table-markup.xml.bz2"
    assert detect_format(str(path)) == "wiki-xml"
    docs, stats = read_all(path, segmenter="blingfire")  # the markup is tested here, not the segmenter
    assert stats.documents == 5 and stats.bytes == 251853  # 5 articles, decompressed size from the README
    sentences = [s for d in docs for s in d.sentences]
    assert len(sentences) > 500
    for marker in ["{{", "}}", "[[", "]]", "{|", "|-", "==", "<ref", "ref>", "style=", "thumb|", "Category:", "&quot;"]:
        assert not [s for s in sentences if marker in s], marker
    # The opening sentence of the first article, with its links resolved to their text.
    assert (
        docs[0]
        .sentences[0]
        .startswith(
            "The constructive vote of no confidence (in German: konstruktives "
            "Misstrauensvotum, in Spanish: moción de censura constructiva) is a "
            "variation on the motion of no confidence"
        )
    )


def test_wiki_xml_memory_stays_flat_over_many_pages(tmp_path, monkeypatch):
    import tracemalloc

    monkeypatch.setattr(readers.files, "BLOCK_SIZE", 64 * 1024)
    page = "<page><title>P{i}</title><ns>0</ns><revision><text>" + "Word " * 200 + "end.</text></revision></page>\n"
    path = tmp_path / "many.xml"
    path.write_text(
        '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">\n'
        + "".join(page.format(i=i) for i in range(2000))
        + "</mediawiki>\n"
    )
    read_all(TINY_DUMP, segmenter="blingfire")  # imports happen outside the measurement
    tracemalloc.start()
    try:
        n = sum(1 for _ in read_documents(str(path), segmenter="blingfire"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == 2000
    assert peak < path.stat().st_size / 2  # pages are cleared as read: ~0.25 MB for a 2 MB dump


def test_wikitext_paragraphs_drops_lists_tables_headers_and_templates():
    wikitext = (
        "{{Infobox|a=b}}\nIntro with [[Link|shown text]] and [[Plain]].<ref name=x>cite</ref>\n"
        "== Heading ==\n* item\n#item\n: indented\n{|\n| cell\n|}\n<ul><li>html item</li></ul>\n"
        "Body ''italic'' '''bold''' [[Image:x.png|thumb|caption]] end.\n[[Category:X]]"
    )
    assert readers.wikitext_paragraphs(wikitext) == ["Intro with shown text and Plain.", "Body italic bold end."]


def test_wiki_xml_errors_name_the_file(tmp_path):
    wrong_root = tmp_path / "other.xml"
    wrong_root.write_text('<?xml version="1.0"?>\n<rss><channel/></rss>\n')
    with pytest.raises(InputError, match=r"other\.xml: an XML file that is not a MediaWiki dump"):
        detect_format(str(wrong_root))
    with pytest.raises(InputError, match=r"other\.xml: the XML root element is <rss>, not <mediawiki>.*--input-format"):
        read_all(wrong_root, "wiki-xml")
    truncated = tmp_path / "cut.xml"
    truncated.write_bytes(TINY_DUMP.read_bytes()[:1200])
    with pytest.raises(InputError, match=r"cut\.xml:\d+: not well-formed XML .*pages-articles dump"):
        read_all(truncated)
