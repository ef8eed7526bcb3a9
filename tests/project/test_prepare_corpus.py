"""Raw text preparation for pretraining and perplexity."""

import gzip

from prepare_corpus import cap_words, gutenberg_paragraphs, prepare, wikitext_paragraphs


def test_gutenberg_paragraphs_join_wrapped_lines():
    lines = ["It was the best\n", "of  times.\n", "\n", "\n", "It was the worst.\n"]
    assert list(gutenberg_paragraphs(lines)) == ["It was the best of times.", "It was the worst."]


def test_wikitext_drops_headings_and_undoes_escapes():
    lines = [
        " \n",
        " = Homarus gammarus = \n",
        " = = Description = = \n",
        " It is 1 @,@ 000 km long , a well @-@ known 2 @.@ 5 <unk> . \n",
    ]
    assert list(wikitext_paragraphs(lines)) == ["It is 1,000 km long , a well-known 2.5 <unk> ."]


def test_cap_words_keeps_whole_paragraphs():
    assert list(cap_words(["a b c", "d e", "f"], 4)) == ["a b c", "d e"]
    assert list(cap_words(["a b c", "d e", "f"], 0)) == ["a b c", "d e", "f"]


def test_prepare_reads_gzip_and_separates_paragraphs_by_blank_lines(tmp_path):
    source = tmp_path / "in.txt.gz"
    with gzip.open(source, "wt", encoding="utf8") as f:
        f.write("One two\nthree.\n\nFour five.\n\nSix.\n")
    out = tmp_path / "out.txt"
    assert prepare("gutenberg", source, out, max_words=4) == 5
    assert out.read_text(encoding="utf8") == "One two three.\n\nFour five.\n\n"
