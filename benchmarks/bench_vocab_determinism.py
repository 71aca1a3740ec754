"""Is ``bertprep build-vocab`` deterministic, and how good is the vocab: the figures of docs/vocab.md
("Deterministic").

Runs ``bertprep build-vocab`` ``--runs`` times, each in a fresh process with its own ``PYTHONHASHSEED`` (0, 1, 2...;
the Rust hash maps of ``tokenizers`` are seeded per process whatever that variable says), on the same input
with the same options, and prints per run the sha256 of every file written and the pieces per word of the
vocab on held-out text. A word is a pre-token of the tokenizer's own pre-tokenizer (BERT: split on whitespace
and punctuation; byte-level BPE: GPT-2's split; Unigram: Metaspace), so each model type is compared with
itself; pieces per word = pieces / words over the held-out lines.

Defaults: the Gutenberg books and Wikipedia articles ``wiki_01``..``wiki_09`` of the shared data (14.7 MB) for
training, ``wiki_10`` (1.0 MB) held out, 16,000 entries. Run (about 30 s per run on one core)::

    python benchmarks/bench_vocab_determinism.py --data ../shared/data --runs 5 --model wordpiece
    python benchmarks/bench_vocab_determinism.py --data ../shared/data --runs 5 --model bpe
    python benchmarks/bench_vocab_determinism.py --data ../shared/data --runs 5 --model unigram

``--model`` is left out of the build-vocab command line for ``wordpiece`` (so the script also measures a
build-vocab that predates the option). ``--upstream`` trains with the ``tokenizers`` trainer alone instead
(``train_from_iterator`` on the same sentences, the same settings, none of ``trainer_determinism``'s
workarounds): the "before" of the figures::

    python benchmarks/bench_vocab_determinism.py --data ../shared/data --runs 3 --model unigram --upstream
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokenizers import Tokenizer


def _train_inputs(data: Path) -> list[str]:
    books = sorted(str(p) for p in (data / "gutenberg").glob("*.txt"))
    wiki = [str(data / "wikipedia" / "wikiextractor-featured" / "AA" / f"wiki_{i:02d}") for i in range(1, 10)]
    return books + wiki


def _held_out_lines(path: Path) -> list[str]:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith(("<doc ", "</doc>")):
            lines.append(line)
    return lines


def pieces_per_word(tokenizer_json: str, lines: list[str]) -> tuple[float, int, int]:
    """(pieces per word, pieces, words) of ``lines`` under the tokenizer (no special tokens)."""
    tokenizer = Tokenizer.from_file(tokenizer_json)
    pieces = words = 0
    for encoding in tokenizer.encode_batch(lines, add_special_tokens=False):
        pieces += len(encoding.ids)
        words += len({w for w in encoding.word_ids if w is not None})
    return pieces / words, pieces, words


def _train_upstream(model: str, inputs: list[str], out: Path, vocab_size: int) -> None:
    """The plain ``tokenizers`` trainer on build-vocab's sentences and settings (no determinism workaround)."""
    from tokenizers import pre_tokenizers, trainers

    from bertprep.core.vocab_files import build_tokenizer
    from bertprep.pipeline.readers import ReaderStats, expand_inputs, read_documents
    from bertprep.pipeline.text import vocab_models
    from bertprep.pipeline.text.vocab import TrainedVocab, VocabConfig, save_vocab

    def sentences():
        for path in expand_inputs(inputs):
            for document in read_documents(path, stats=ReaderStats()):
                yield from document.sentences

    config = VocabConfig(
        vocab_size=vocab_size,
        show_progress=False,
        model=model,
        **({} if model == "wordpiece" else {"num_unused": 0, "do_lower_case": False, "limit_alphabet": None}),
    )
    if model == "wordpiece":
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size,
            min_frequency=config.min_frequency,
            show_progress=False,
            special_tokens=config.reserved_tokens,
            continuing_subword_prefix="##",
            limit_alphabet=config.limit_alphabet,
        )
        tokenizer = build_tokenizer({}, True)
        tokenizer.train_from_iterator(sentences(), trainer=trainer)
        vocab = tokenizer.get_vocab(with_added_tokens=False)
        tokens = sorted(vocab, key=vocab.__getitem__)
    else:
        tokenizer = (vocab_models.bpe_tokenizer if model == "bpe" else vocab_models.unigram_tokenizer)(False)
        trainer = (
            trainers.BpeTrainer(
                vocab_size=vocab_size,
                min_frequency=2,
                show_progress=False,
                special_tokens=vocab_models.special_added_tokens(),
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            )
            if model == "bpe"
            else trainers.UnigramTrainer(
                vocab_size=vocab_size,
                show_progress=False,
                special_tokens=vocab_models.special_added_tokens(),
                unk_token="<unk>",
            )
        )
        tokenizer.train_from_iterator(sentences(), trainer=trainer)
        vocab_models.add_post_processor(tokenizer, model)
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        tokens = sorted(vocab, key=vocab.__getitem__)
    save_vocab(TrainedVocab(tokenizer, tokens, config), str(out))


def _build(bertprep: str, inputs: list[str], out: Path, args, seed: int) -> None:
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    if args.upstream:
        command = [sys.executable, __file__, "--train-upstream", args.model, str(out), str(args.vocab_size), *inputs]
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return
    command = [bertprep, "build-vocab", *inputs, "-o", str(out), "--vocab-size", str(args.vocab_size), "-q"]
    if args.model != "wordpiece":
        command += ["--model", args.model]
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--train-upstream"]:  # (one run of --upstream, in its own process)
        _train_upstream(argv[1], argv[4:], Path(argv[2]), int(argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--model", choices=("wordpiece", "bpe", "unigram"), default="wordpiece")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--vocab-size", type=int, default=16000)
    parser.add_argument("--max-inputs", type=int, default=None, help="Train on the first N inputs only.")
    parser.add_argument("--upstream", action="store_true", help="The tokenizers trainer alone (no workaround).")
    args = parser.parse_args(argv)
    bertprep = str(Path(sys.executable).parent / "bertprep")
    inputs = _train_inputs(args.data)[: args.max_inputs]
    held_out = _held_out_lines(args.data / "wikipedia" / "wikiextractor-featured" / "AA" / "wiki_10")
    extra = ("" if args.model == "wordpiece" else f" --model {args.model}") + (
        " (upstream trainer)" if args.upstream else ""
    )
    print(f"build-vocab{extra} --vocab-size {args.vocab_size}: {len(inputs)} inputs, {args.runs} runs")
    figures, all_digests, seconds = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            out = Path(tmp) / f"run{run}"
            start = time.perf_counter()
            _build(bertprep, inputs, out, args, seed=run)
            seconds.append(time.perf_counter() - start)
            digests = _digests(out)
            ppw, pieces, words = pieces_per_word(str(out / "tokenizer.json"), held_out)
            figures.append(ppw)
            all_digests.append(digests)
            files = "  ".join(f"{name} {digest[:16]}" for name, digest in digests.items())
            print(
                f"run {run} (PYTHONHASHSEED={run}, {seconds[-1]:.1f} s): pieces/word {ppw:.4f} ({pieces:,} / {words:,})"
            )
            print(f"    {files}")
    identical = all(d == all_digests[0] for d in all_digests)
    spread = f"{min(figures):.4f}..{max(figures):.4f}"
    print(f"pieces/word on held-out wiki_10: median {statistics.median(figures):.4f} (range {spread})")
    print(f"build-vocab wall time: median {statistics.median(seconds):.1f} s")
    print(f"every file byte-identical in all {args.runs} runs: {'yes' if identical else 'NO'}")


if __name__ == "__main__":
    main()
