"""Check a ``bertprep export`` of a fine-tuned classifier: ``transformers`` loads it and gives the logits bertprep
gives (the same tokens, logits within ``--atol``) on the first sentences of a GLUE-style TSV.

    python demo/check_export.py --model runs/book/best --export hf/book --input task/dev.tsv [-n 8]

Prints one line (the largest logit difference and whether the predicted labels agree) and exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import sys


def compare(model_dir: str, export_dir: str, input_file: str, n: int) -> tuple[float, bool, int]:
    """(largest |logit difference|, same token ids, sentences compared) between bertprep and transformers."""
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from bertprep.bert_model.tasks.predict import load_finetuned, run_model

    model, task, tokenizer = load_finetuned(model_dir)
    examples = task.read(input_file, limit=n)
    features = task.featurize(examples, tokenizer, with_labels=False)
    ours = np.stack([o["logits"] for o in run_model(model, features, batch_size=n, device=torch.device("cpu"))])

    hf_tokenizer = AutoTokenizer.from_pretrained(export_dir)
    hf_model = AutoModelForSequenceClassification.from_pretrained(export_dir).eval()
    batch = hf_tokenizer(
        [e.text_a for e in examples], padding=True, truncation=True, max_length=task.max_seq_length, return_tensors="pt"
    )
    same_ids = all(
        batch["input_ids"][i][: len(f["input_ids"])].tolist() == f["input_ids"] for i, f in enumerate(features)
    )
    with torch.no_grad():
        theirs = hf_model(**batch).logits.numpy()
    return float(np.abs(ours - theirs).max()), same_ids, len(examples)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="The 'bertprep finetune' output (its best/ directory).")
    parser.add_argument("--export", required=True, help="The 'bertprep export' directory of the same model.")
    parser.add_argument("--input", required=True, help="A GLUE-style TSV the model reads (its labels are not used).")
    parser.add_argument("-n", type=int, default=8, help="Sentences to compare.")
    parser.add_argument("--atol", type=float, default=1e-4, help="Largest logit difference accepted.")
    args = parser.parse_args(argv)
    diff, same_ids, n = compare(args.model, args.export, args.input, args.n)
    ok = same_ids and diff <= args.atol
    print(
        f"transformers vs bertprep on {n} sentences: same token ids {same_ids}, max |logit diff| {diff:.1e} "
        f"(limit {args.atol:.0e}): {'OK' if ok else 'MISMATCH'}"
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
