"""The GPU check: is bertprep's trainer correct on this GPU, and how fast is it against ``transformers``?

Run it through ``benchmarks/gpu_check.sh`` (one command, under 8 minutes on one GPU). Sections, in this order,
each timed against a budget so that the run ends on time (a section that no longer fits says so):

a. correctness: the same weights on the CPU (fp32, the dense-mask reference) and on the GPU (bf16 autocast, the
   attention kernel ``auto`` picks, FlashAttention-2's varlen kernel), BERT and ModernBERT, padded and packed:
   MLM logits within bf16 tolerance (relative Frobenius error < 2e-2), the GPU's fp32 ``sdpa`` path within
   1e-4 of the CPU's; the varlen kernel with attention dropout: reproducible under one seed, different under
   another, finite gradients;
b. ``bertprep train`` for 200 steps of ``mini`` (packed, the defaults otherwise: bf16, the ``auto`` kernel,
   ``torch.compile``) on the shards: the loss falls, no NaN;
c. BERT-Base at 128 and 512 tokens: real tokens/s, MFU and peak memory of bertprep (padded and packed) and of
   ``transformers.BertForMaskedLM`` (``sdpa``) on the same instances, eager and compiled, a full training step
   (forward, backward, fused AdamW) in bf16 autocast;
d. the same for ModernBERT-base against ``transformers.ModernBertForMaskedLM`` (``sdpa``, sparse prediction);
e. with more than one GPU: 2 steps of ``torchrun --nproc_per_node=N``.

The exit status is 1 when a correctness check fails (a, b, e), else 0. Every figure is printed and written to
a new folder ``--out``/run-N of each run, named in its first line (``results.jsonl``, one JSON object a
measurement, ``summary.md``, the table, and the train runs and their logs), so a second run into the same ``--out``
starts afresh and leaves the first's as they were. Tokens/s count real
(non-padding) tokens; step times are medians over the timed steps (CUDA events). MFU = model FLOPs per token
(``training_flops``: 6 N per token + 12 L H per (query, key) pair of each instance's own sum(l^2), PaLM appendix
B) x real tokens/s / the GPU's dense bf16 peak (``metrics.GPU_PEAK_FLOPS``, the exact model); ``transformers``'
masked-LM head runs on every token, so its FLOPs per token count the head at every position (bertprep's at the
masked ones): MFU says how busy each keeps the GPU, tokens/s which trains faster.

bertprep's models are built as ``bertprep train`` builds them: BERT's vocab padded to a multiple of 64 inside the
model, ``--kernels`` (``auto``: Liger's LayerNorm on CUDA where installed) and ``--compile-mode`` as given.

Time: each measurement runs under its own alarm (``--measure-seconds``; the compiled ones twice that) and never
past the budget, and ``summary.md`` is rewritten after every row, so neither a slow compilation nor the caller's
time limit can cut the table; a measurement cut short is a row saying so.

Without a GPU (``--self-test``): the same sections on the CPU with tiny models and a few steps, to check this
script's own plumbing; ``--steps 0`` skips the throughput sections, ``--train-steps 0`` the train check.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field

import numpy as np
import torch

from bertprep.bert_model.collate import collate_numpy, collate_packed_numpy
from bertprep.bert_model.loop_config import COMPILE_MODES, KernelConfig
from bertprep.bert_model.metrics import device_peak_flops
from bertprep.bert_model.models.attention import configure_attention
from bertprep.bert_model.models.kernels import KERNELS, configure_kernels
from bertprep.bert_model.models.packing import TokenBudgetPacker, attention_pairs, sequence_ids_from_attention_mask
from bertprep.bert_model.optim import create_optimizer
from bertprep.bert_model.pretrain.architectures import (
    PretrainingModel,
    build_model,
    model_config_from_preset,
    training_flops,
)
from bertprep.bert_model.pretrain.data import ShardDataset
from bertprep.bert_model.pretrain.model_setup import compile_model
from bertprep.bert_model.pretrain.shard_info import read_shard_info

#: Vocab sizes of the published models whose step time is measured (their decoders' cost).
BERT_VOCAB, MODERNBERT_VOCAB = 30522, 50368


# ------------------------------------------------------------------------------------------------ report


@dataclass
class Report:
    """Prints each result as it comes, keeps the rows of the final table, and remembers failures."""

    out_dir: str
    deadline: float
    failures: list[str] = field(default_factory=list)
    table: list[str] = field(default_factory=list)
    rates: dict[str, float] = field(default_factory=dict)

    def log(self, record: dict) -> None:
        print(json.dumps(record), flush=True)
        with open(os.path.join(self.out_dir, "results.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def check(self, name: str, ok: bool, detail: str) -> None:
        detail = " / ".join(line.strip() for line in detail.strip().splitlines()[-2:])
        self.log({"check": name, "ok": bool(ok), "detail": detail})
        self.table.append(f"| check: {name} | {'ok' if ok else 'FAILED'} | {detail} | | |")
        if not ok:
            self.failures.append(f"{name}: {detail}")
        self.flush()

    header: list[str] = field(default_factory=list)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def flush(self) -> None:
        """(Re)write ``summary.md`` with the rows so far: whatever stops the run later, the table is there."""
        summary = [*self.header, *self.table, "", *goals(self)]
        with open(os.path.join(self.out_dir, "summary.md"), "w", encoding="utf-8") as f:
            f.write("\n".join(summary) + "\n")

    @contextlib.contextmanager
    def section(self, name: str, needs_s: float, correctness: bool = False):
        """Run a section if ``needs_s`` seconds are left; an exception inside is reported, not raised (and counts
        as a failure for a correctness section)."""
        if self.left() < needs_s:
            self.log({"section": name, "skipped": f"{self.left():.0f} s left of the budget, needs ~{needs_s:.0f} s"})
            self.table.append(f"| {name} | skipped: time budget | | | |")
            yield False
            return
        t0 = time.monotonic()
        print(f"== {name}", flush=True)
        try:
            yield True
        except Exception as err:  # one section's error must not end the others
            traceback.print_exc()
            self.log({"section": name, "error": f"{type(err).__name__}: {err}"})
            self.table.append(f"| {name} | error | {type(err).__name__}: {str(err)[:160]} | | |")
            if correctness:
                self.failures.append(f"{name}: {type(err).__name__}: {err}")
        self.log({"section": name, "seconds": round(time.monotonic() - t0, 1)})
        self.flush()


# ----------------------------------------------------------------------------------------------- batches


def read_rows(shards: str, limit: int) -> list[dict]:
    """Up to ``limit`` instances of ``shards``, in file order, masked as training masks them: as make-shards
    masked them, or now, as the loader does, for shards made with ``--masking dynamic`` (whose rows hold no
    masks: unmasked, every loss would be a mean over no target, NaN, a false "non-finite loss")."""
    ds = ShardDataset(shards, batch_size=1, shuffle=False, infinite=False)
    state = ds._open_stream(0, ds._fresh_state(0))
    rows = []
    for ref in range(min(limit, read_shard_info(shards).num_rows)):
        row = ds._masked_row(state, ds._read_row(state, ref))
        rows.append({k: (np.asarray(v) if not isinstance(v, int) else v) for k, v in row.items()})
    return rows


def to_tensors(arrays: dict) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}


def step_batches(rows: list[dict], num_rows: int, seq_length: int, steps: int) -> list[dict]:
    """``steps`` pairs of batches of the same instances: bertprep's packed rows (``TokenBudgetPacker``:
    ``num_rows`` rows of ``seq_length`` tokens) and the same instances padded (``collate_numpy``); and the
    padded layout with ``num_rows`` instances a step. Instances are reused cyclically when ``rows`` runs out."""
    packer, packed, padded, i = TokenBudgetPacker(num_rows, seq_length), [], [], 0
    while len(packed) < steps:
        row = rows[i % len(rows)]
        i += 1
        step = packer.add(i - 1, len(row["input_ids"]))
        if step is None:
            continue
        keys = [k for r in step for k in r]
        subset = [rows[k % len(rows)] for k in keys]
        position = {k: j for j, k in enumerate(keys)}
        layout = [[position[k] for k in r] for r in step]
        packed.append(
            {
                "bertprep": to_tensors(collate_packed_numpy(subset, max_seq_length=seq_length, layout=layout)),
                "same instances padded": to_tensors(collate_numpy(subset)),
            }
        )
    for s in range(steps):
        chunk = [rows[(s * num_rows + j) % len(rows)] for j in range(num_rows)]
        padded.append(to_tensors(collate_numpy(chunk)))
    return packed, padded


def hf_labels(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, T) labels of a padded batch for ``transformers``' MLM loss: the original ids at the masked positions."""
    labels = torch.full_like(batch["input_ids"], -100)
    labels.scatter_(1, batch["masked_lm_positions"], batch["masked_lm_ids"])
    labels[:, 0] = -100  # (empty slots point at [CLS] with id -100)
    return labels


# ----------------------------------------------------------------------------------------------- models


def bertprep_model(
    architecture: str, preset: str, vocab_size: int, specials: dict, dropout: float | None = None, pad: int = 1
):
    """A fresh model as ``bertprep train`` builds it; ``pad``: BERT's ``pad_vocab_size_multiple`` (train's 64)."""
    overrides = {} if dropout is None else {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    config = model_config_from_preset(
        architecture, preset, vocab_size=vocab_size, special_token_ids=specials, overrides=overrides
    )
    if architecture == "bert":
        config = dataclasses.replace(config, pad_vocab_size_multiple=pad)
    return config, build_model(config)


def hf_model(config):
    """The ``transformers`` twin of a bertprep config (same sizes): ``BertForMaskedLM`` or
    ``ModernBertForMaskedLM`` with sparse prediction, ``sdpa`` attention."""
    import transformers

    if getattr(config, "architecture", "bert") == "modernbert":
        values = {k: v for k, v in config.to_hf_dict().items() if k not in ("architectures", "model_type")}
        hf_config = transformers.ModernBertConfig(**{**values, "sparse_prediction": True})
        return transformers.ModernBertForMaskedLM._from_config(hf_config, attn_implementation="sdpa")
    values = dict(config.to_hf_dict())  # (the real vocab: transformers' own, unpadded)
    hf_config = transformers.BertConfig(**values)
    return transformers.BertForMaskedLM._from_config(hf_config, attn_implementation="sdpa")


# ------------------------------------------------------------------------------------------------ timing


class Timer:
    """Median step time by CUDA events on a GPU (host clock on the CPU), and the peak memory."""

    def __init__(self, device: torch.device):
        self.device = device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)

    def time(self, fn) -> float:
        if self.device.type != "cuda":
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(self.device)
        return start.elapsed_time(end) / 1000

    def peak_gib(self) -> float | None:
        return torch.cuda.max_memory_allocated(self.device) / 2**30 if self.device.type == "cuda" else None


def measure(
    model,
    batches,
    make_inputs,
    loss_of,
    device,
    warmup: int,
    steps: int,
    compile_backend: str | None,
    profile_to=None,
    compile_mode: str = "default",
):
    """Real tokens/s (median over ``steps`` timed steps after ``warmup``) of training steps of ``model`` (forward,
    backward, fused AdamW on CUDA) on ``batches``, in bf16 autocast on CUDA; and the peak memory in GiB. With
    ``profile_to``, three more steps under ``torch.profiler`` write the kernels that took the time there."""
    model.train()
    optimizer = create_optimizer(model, learning_rate=1e-5)
    # (compiled as train compiles: CUDA-graph modes start static, floats are constants)
    runner = compile_model(model, compile_mode, backend=compile_backend) if compile_backend else model
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    timer = Timer(device)
    rates, losses = [], []

    def step_of(i: int):
        batch = {k: v.to(device, non_blocking=True) for k, v in batches[i % len(batches)].items()}
        inputs = make_inputs(batch)

        def step():
            with autocast:
                loss = loss_of(runner(**inputs))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.detach())

        return step, int(batch["attention_mask"].sum())

    for i in range(warmup + steps):
        step, tokens = step_of(i)
        seconds = timer.time(step)
        if i >= warmup:
            rates.append(tokens / seconds)
    finite = all(torch.isfinite(x).item() for x in losses)
    if profile_to:
        profile_steps(profile_to, step_of, device)
    return statistics.median(rates), timer.peak_gib(), finite


def profile_steps(path: str, step_of, device: torch.device, steps: int = 3) -> None:
    """Run ``steps`` steps under ``torch.profiler`` and write the 30 operators and kernels with the most device
    time to ``path`` (and the first rows to stdout)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for i in range(steps):
            step_of(i)[0]()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=30, max_name_column_width=70)
    with open(path, "w", encoding="utf-8") as f:
        f.write(table)
    print("\n".join(table.splitlines()[:16]), flush=True)


# -------------------------------------------------------------------------------------------- sections


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def check_close(report: Report, name: str, out: torch.Tensor, ref: torch.Tensor, limit: float) -> None:
    """Report check ``name``: the relative error (L2) of ``out`` against ``ref`` is below ``limit``."""
    err = relative_error(out, ref)
    mantissa, exponent = f"{limit:.0e}".split("e")  # 2e-2, not 2e-02
    report.check(name, err < limit, f"relative error {err:.2e} (< {mantissa}e{int(exponent)})")


def check_correctness(report: Report, args, device: torch.device, rows: list[dict], specials: dict) -> None:
    """Section a (see the module docstring)."""
    preset = "tiny" if args.self_test else "mini"
    for architecture in ("bert", "modernbert"):
        torch.manual_seed(0)
        _, inner = bertprep_model(architecture, preset, max(args.min_vocab, args.vocab_size), specials, 0.0)
        reference = PretrainingModel(inner).eval()
        on_device = copy.deepcopy(reference).to(device)
        kernel = configure_attention(on_device, "auto", device, device.type == "cuda")
        for layout in ("padded", "packed"):
            arrays = (
                collate_packed_numpy(rows[:48], max_seq_length=args.seq)
                if layout == "packed"
                else collate_numpy(rows[:24])
            )
            batch = to_tensors(arrays)
            real = batch["masked_lm_ids"] != -100
            with torch.no_grad():
                ref = reference(**batch).prediction_logits[real]
                gpu_batch = {k: v.to(device) for k, v in batch.items()}
                with torch.autocast(device.type, dtype=torch.bfloat16):
                    out = on_device(**gpu_batch).prediction_logits[real.to(device)]
                check_close(
                    report, f"{architecture} {layout}: {device.type} bf16 ({kernel}) vs CPU fp32", out, ref, 2e-2
                )
                if device.type == "cuda":
                    configure_attention(on_device, "sdpa", device, False)
                    fp32 = on_device(**gpu_batch).prediction_logits[real.to(device)]
                    check_close(report, f"{architecture} {layout}: cuda fp32 sdpa vs CPU fp32", fp32, ref, 1e-4)
                    configure_attention(on_device, "auto", device, True)
    if device.type == "cuda":
        check_attention_dropout(report, device, rows, specials, args)


def check_attention_dropout(report: Report, device: torch.device, rows: list[dict], specials: dict, args) -> None:
    """The varlen kernel with attention dropout: the same draws under one seed, others under another, finite
    gradients."""
    _, inner = bertprep_model("bert", "mini", max(args.min_vocab, args.vocab_size), specials, 0.1)
    model = PretrainingModel(inner).to(device).train()
    kernel = configure_attention(model, "auto", device, True)
    batch = {k: v.to(device) for k, v in to_tensors(collate_packed_numpy(rows[:48], max_seq_length=args.seq)).items()}
    losses = []
    for seed in (1, 1, 2):
        torch.manual_seed(seed)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**batch).training_loss(1.0)
        losses.append(loss.item())
    torch.manual_seed(1)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(**batch).training_loss(1.0)
    loss.backward()
    grads_finite = all(torch.isfinite(p.grad).all().item() for p in model.parameters() if p.grad is not None)
    ok = losses[0] == losses[1] and losses[0] != losses[2] and grads_finite and math.isfinite(losses[0])
    report.check(
        f"{kernel} with attention dropout 0.1", ok, f"losses seed 1, 1, 2: {losses}; gradients finite: {grads_finite}"
    )


def check_training(report: Report, args, shards: str, architecture: str, steps: int) -> None:
    """Section b: ``bertprep train`` for ``steps`` steps; the loss falls and stays finite."""
    out = os.path.join(args.out, f"train-{architecture}")
    preset = "tiny" if args.self_test else "mini"
    cmd = [sys.executable, "-m", "bertprep.cli.main", "train", "--shards", shards, "-o", out, "--preset", preset]
    cmd += ["--architecture", architecture, "--max-steps", str(steps), "--warmup-steps", str(max(1, steps // 10))]
    cmd += ["--learning-rate", "1e-3", "--batch-size", "64" if not args.self_test else "8", "--packing"]
    cmd += ["--log-every", str(max(1, steps // 10)), "--save-every", "0", "--no-progress"]
    if args.self_test:
        cmd += ["--no-compile"]
    print("$", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    try:  # bounded by the budget: a train check that would run past it is cut, and said so
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=max(10.0, report.left()))
    except subprocess.TimeoutExpired:
        report.check(f"train {architecture} {preset} {steps} steps", False, "cut by the time budget")
        return
    seconds = time.monotonic() - t0
    with open(os.path.join(args.out, f"train-{architecture}.log"), "w", encoding="utf-8") as f:
        f.write(result.stdout + result.stderr)
    if result.returncode != 0:
        report.check(
            f"train {architecture} {preset} {steps} steps", False, f"exit {result.returncode}: {result.stderr[-400:]}"
        )
        return
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        lines = [json.loads(x) for x in f]
    train_lines = [x for x in lines if x["split"] == "train"]
    losses = [x["loss"] for x in train_lines]
    # (the self-test's few steps on any shards check the plumbing: finite losses; on a GPU the loss must fall)
    ok = all(math.isfinite(x) for x in losses) and (losses[-1] < losses[0] or args.self_test)
    last = train_lines[-1]
    kernel = next((line.split("attention: ")[1] for line in result.stderr.splitlines() if "attention: " in line), "?")
    detail = (
        f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; {last['tokens_per_s']:,.0f} tokens/s"
        + (f", MFU {last['mfu']:.1%}" if "mfu" in last else "")
        + f"; {kernel}; {seconds:.0f} s with start-up"
    )
    report.check(f"train {architecture} {preset} {steps} steps (packed)", ok, detail)


@dataclass
class Workload:
    """The batches of one architecture and sequence length, made once and measured several ways."""

    architecture: str
    seq: int
    packed: list[dict]
    """Per step: ``{"bertprep": packed batch, "same instances padded": padded batch}``."""
    padded: list[dict]
    """Per step: ``tokens_per_step // seq`` instances padded (bertprep's padded layout)."""


def workload(args, architecture: str, shards: str, rows: list[dict]) -> Workload:
    seq = read_shard_info(shards).max_seq_length
    packed, padded = step_batches(rows, max(1, args.tokens_per_step // seq), seq, args.warmup + args.steps)
    return Workload(architecture, seq, packed, padded)


def masked_fraction(batches: list[dict]) -> float:
    """Predicted positions per real token of ``batches`` (what the MLM head's FLOPs scale with)."""
    masked = sum(int((b["masked_lm_ids"] != -100).sum()) for b in batches)
    return masked / sum(int(b["attention_mask"].sum()) for b in batches)


def measure_one(report: Report, args, device, w: Workload, specials: dict, who: str, packed: bool, compiled: bool):
    """One line of sections c / d: ``who`` (bertprep or transformers) on ``w``'s packed instances (``packed``;
    transformers gets the same instances padded) or bertprep's padded batches, eager or compiled."""
    preset = "tiny" if args.self_test else "base"
    published = MODERNBERT_VOCAB if w.architecture == "modernbert" else BERT_VOCAB
    vocab = args.vocab_size if args.self_test else max(args.vocab_size, published)
    if who == "bertprep":
        batches = [p["bertprep"] for p in w.packed] if packed else w.padded
        layout = "packed" if packed else "padded"
    else:
        batches, layout = [p["same instances padded"] for p in w.packed], "padded, same instances as packed"
    name = f"{w.architecture} {preset} {w.seq} | {who} | {layout} | {'compiled' if compiled else 'eager'}"
    if report.left() < (90 if compiled else 20):
        report.table.append(f"| {name} | skipped: time budget | | |")
        return
    torch.manual_seed(0)
    with torch.device(device):  # (initialised on the device: seconds less per model)
        config, inner = bertprep_model(w.architecture, preset, vocab, specials, pad=64 if who == "bertprep" else 1)
    backend = ("inductor" if device.type == "cuda" else "aot_eager") if compiled else None
    fraction = masked_fraction(batches)
    try:
        with time_limit(min(args.measure_seconds * (2 if compiled else 1), max(1.0, report.left())), name):
            if who == "bertprep":
                model = PretrainingModel(inner)
                kernel = configure_attention(model, "auto", device, device.type == "cuda")
                kernel += "" if configure_kernels(model, args.kernels, device) == "torch" else " + liger"
                rate, mem, finite = measure(
                    model, batches, lambda b: b, lambda o: o.training_loss(1.0), device, args.warmup, args.steps,
                    backend, profile_path(args, name), args.compile_mode,
                )  # fmt: skip
                fpt = flops_of(config, batches, fraction)
            else:
                model, kernel = hf_model(config).to(device), "sdpa"
                rate, mem, finite = measure(
                    model, batches, hf_inputs, lambda o: o.loss, device, args.warmup, args.steps, backend,
                    profile_path(args, name), args.compile_mode,
                )  # fmt: skip
                # transformers' BERT head scores every token; its ModernBERT's (sparse prediction) the masked ones
                fpt = flops_of(config, batches, 1.0 if w.architecture == "bert" else fraction)
    except Exception as err:  # out of memory, a missing package, its time: the next measurement still runs
        traceback.print_exc()
        report.log({"throughput": name, "error": f"{type(err).__name__}: {err}"})
        report.table.append(f"| {name} | error | {type(err).__name__}: {str(err).splitlines()[0][:120]} | | |")
        report.flush()
        return
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    peak = device_peak_flops(device, "bf16")
    mfu = fpt * rate / peak if peak else None
    report.log(
        {
            "throughput": name,
            "kernel": kernel,
            "tokens_per_s": round(rate),
            "mfu": mfu,
            "flops_per_token": fpt,
            "peak_memory_gib": mem,
            "finite": finite,
            "seconds_left": round(report.left()),
        }
    )
    mfu_text = "" if mfu is None else f"{mfu:.1%}"
    mem_text = "" if mem is None else f"{mem:.1f}"
    report.table.append(f"| {name} | {kernel} | {rate:,.0f} | {mfu_text} | {mem_text} |")
    report.rates[name] = rate
    if not finite:
        report.failures.append(f"{name}: non-finite loss")
    report.flush()


def flops_of(config, batches: list[dict], fraction: float) -> float:
    """Model FLOPs per real token of ``batches`` (``training_flops``: attention over each instance's own length)."""
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    pairs = 0
    for b in batches:
        ids = b.get("sequence_ids")
        pairs += int(attention_pairs(ids if ids is not None else sequence_ids_from_attention_mask(b["attention_mask"])))
    return training_flops(config, tokens, pairs, fraction) / max(tokens, 1)


class MeasurementTimeout(Exception):
    """A measurement ran past its time (``time_limit``)."""


@contextlib.contextmanager
def time_limit(seconds: float, name: str):
    """Raise ``MeasurementTimeout`` in the main thread after ``seconds`` (SIGALRM; where it exists), so that one
    slow measurement or compilation cannot eat the budget of the rest and of the table."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        raise MeasurementTimeout(f"{name} ran past its {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def profile_path(args, name: str) -> str | None:
    """Where ``--profile`` writes the kernel table of measurement ``name`` (None without ``--profile``)."""
    if not args.profile:
        return None
    slug = "-".join(part.strip().split()[0] for part in name.split("|")) + "-" + name.split()[2]
    return os.path.join(args.out, f"profile-{slug}.txt")


def hf_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"], "labels": hf_labels(batch)}


def check_torchrun(report: Report, args, shards: str) -> None:
    """Section e: 2 steps of ``torchrun --nproc_per_node=N`` (N GPUs)."""
    n = torch.cuda.device_count()
    out = os.path.join(args.out, "torchrun")
    cmd = ["torchrun", "--standalone", f"--nproc_per_node={n}", "-m", "bertprep.cli.main", "train"]
    cmd += ["--shards", shards, "-o", out, "--preset", "mini", "--max-steps", "2", "--warmup-steps", "1"]
    cmd += ["--batch-size", "32", "--no-progress", "--save-every", "0"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    report.check(
        f"torchrun on {n} GPUs, 2 steps", result.returncode == 0, f"exit {result.returncode}; {result.stderr[-300:]}"
    )


# ------------------------------------------------------------------------------------------------ main


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards-128", required=True, help="shards of max_seq_length 128 (make-shards output)")
    parser.add_argument("--shards-512", help="shards of max_seq_length 512 (the 512-token measurements)")
    parser.add_argument(
        "--out",
        required=True,
        help="folder of the runs: each run writes results.jsonl, summary.md and its train runs into a new OUT/run-N",
    )
    parser.add_argument("--budget-minutes", type=float, default=7.5, help="stop starting sections after this")
    parser.add_argument("--tokens-per-step", type=int, default=65536, help="rows x sequence length of a step")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per measurement (median)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens there)")
    parser.add_argument("--train-steps", type=int, default=200, help="steps of the bertprep train check")
    parser.add_argument("--self-test", action="store_true", help="tiny models on the CPU: check this script")
    # Not "--only": inductor reads the value after "--only" in sys.argv as a torchbench model name and pastes it
    # unescaped into the code it generates (torch._inductor.utils.get_benchmark_name, in the benchmark harness of
    # every compiled module), so a name holding an apostrophe made every torch.compile of the process fail with
    # "unterminated string literal".
    parser.add_argument(
        "--select",
        default=None,
        help="comma-separated starts of measurement names (e.g. 'bert base 128 | bertprep | packed | compiled'), "
        "and 'train modernbert': run those alone, no correctness or other training sections",
    )
    parser.add_argument("--profile", action="store_true", help="also write each measurement's top kernels")
    parser.add_argument(
        "--measure-seconds", type=float, default=60, help="time limit of an eager measurement (compiled: twice)"
    )
    parser.add_argument("--kernels", choices=KERNELS, default=KernelConfig.kernels, help="as train --kernels")
    parser.add_argument(
        "--compile-mode", choices=COMPILE_MODES, default=KernelConfig.compile_mode, help="as train --compile-mode"
    )
    return parser.parse_args(argv)


def describe_device(device: torch.device) -> str:
    if device.type != "cuda":
        return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__}"
    p = torch.cuda.get_device_properties(device)
    peak = device_peak_flops(device)
    return (
        f"{p.name} (compute capability {p.major}.{p.minor}, {p.total_memory / 2**30:.0f} GiB, "
        f"{p.multi_processor_count} SMs; dense bf16 peak "
        f"{'unknown' if peak is None else f'{peak / 1e12:.0f} TFLOP/s'}), "
        f"{torch.cuda.device_count()} GPU(s), torch {torch.__version__}, CUDA {torch.version.cuda}"
    )


def measurement_name(arch: str, seq: int, who: str, packed: bool, compiled: bool, args) -> str:
    """The name ``measure_one`` gives a measurement (what ``--select`` matches)."""
    preset = "tiny" if args.self_test else "base"
    layout = ("packed" if packed else "padded") if who == "bertprep" else "padded, same instances as packed"
    return f"{arch} {preset} {seq} | {who} | {layout} | {'compiled' if compiled else 'eager'}"


def schedule(self_test: bool) -> list[tuple[str, int, str, bool, bool]]:
    """(architecture, seq, who, packed, compiled) in the order they run: the compiled pairs the goals compare
    (bertprep packed and transformers on the same instances: BERT-Base at 128 and 512, ModernBERT-base at 512
    and 128), then the eager pairs, then bertprep's padded layout, while the time budget lasts. The self-test
    measures the packed eager ones at 128 and compiles one (its plumbing is the same for all)."""
    pairs = [("bert", 128), ("bert", 512), ("modernbert", 512), ("modernbert", 128)]
    both = (("bertprep", True), ("transformers", True))
    compiled = [(arch, seq, who, packed, True) for arch, seq in pairs for who, packed in both]
    eager = [(arch, seq, who, packed, False) for arch, seq in pairs for who, packed in both]
    if self_test:
        return sorted((e for e in eager if e[1] == 128), key=lambda e: e[0]) + [("bert", 128, "bertprep", True, True)]
    padded = [(arch, seq, "bertprep", False, False) for arch, seq in pairs] + [("bert", 128, "bertprep", False, True)]
    return compiled + eager + padded


def goals(report: Report) -> list[str]:
    """The issue's goals as sentences, from the measured rates (those measured)."""
    out = []
    pairs = [
        (arch, seq, mode) for arch in ("bert", "modernbert") for seq in (128, 512) for mode in ("compiled", "eager")
    ]
    for arch, seq, mode in pairs:
        ours = report.rates.get(f"{arch} base {seq} | bertprep | packed | {mode}")
        theirs = report.rates.get(f"{arch} base {seq} | transformers | padded, same instances as packed | {mode}")
        if ours and theirs:
            out.append(f"{arch}-base {seq} {mode}: bertprep packed / transformers = {ours / theirs:.2f}x tokens/s")
    return out


def open_inputs(args) -> str | None:
    """Check the folders the command line names; a one-line reason when one is unusable, else None."""
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        return f"--out {args.out} is a file, not a folder; name a folder for the results"
    for option, path in (("--shards-128", args.shards_128), ("--shards-512", args.shards_512)):
        if path is None:
            continue
        try:
            read_shard_info(path)
        except (OSError, ValueError) as err:
            return f"{option} {path}: {str(err).splitlines()[0]}"
    try:
        os.makedirs(args.out, exist_ok=True)
        args.out = fresh_run_folder(args.out)
    except OSError as err:
        return f"--out {args.out}: {err.strerror or err}"
    return None


def fresh_run_folder(out: str) -> str:
    """``OUT/run-N`` for the first N not taken, created here: each run of the check writes its table, logs and
    train runs into a folder of its own, so a second run into the same ``--out`` (gpu.md asks for one with another
    ``--compile-mode``) neither meets the first's train runs (``train`` refuses a folder holding checkpoints) nor
    replaces its table. ``os.mkdir`` claims the number, so two checks started together get two folders."""
    n = 1
    while True:
        path = os.path.join(out, f"run-{n}")
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            n += 1


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    problem = open_inputs(args)
    if problem:
        print(f"gpu_check: {problem}", file=sys.stderr)
        return 2
    print(f"gpu_check: results of this run in {args.out}", flush=True)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.self_test else "cpu")
    if args.self_test:
        args.tokens_per_step = 512  # tiny models; --steps, --warmup and --train-steps as given (fewer by default)
        args.steps, args.warmup, args.train_steps = (
            min(v, cap) for v, cap in ((args.steps, 2), (args.warmup, 1), (args.train_steps, 6))
        )
    report = Report(args.out, time.monotonic() + 60 * args.budget_minutes)
    info = read_shard_info(args.shards_128)
    args.seq, args.vocab_size = info.max_seq_length, info.vocab_size
    args.min_vocab = 0 if args.self_test else BERT_VOCAB  # (the published vocab's decoder cost, on a GPU)
    specials = info.special_token_ids
    report.header = [
        f"device: {describe_device(device)}",
        "",
        "| model and length | who | layout | mode | kernel | real tokens/s | MFU | peak GiB |",
        "|---|---|---|---|---|---:|---:|---:|",
    ]
    report.log({"device": describe_device(device), "command": " ".join([sys.executable, *sys.argv])})
    print("device:", describe_device(device), flush=True)
    rows = {128: read_rows(args.shards_128, 4096)}
    if args.shards_512:
        rows[512] = read_rows(args.shards_512, 2048)
    run_sections(report, args, device, rows, specials)
    report.flush()
    print("\n".join([*report.header, *report.table, "", *goals(report)]), flush=True)
    if report.failures:
        print("FAILED:", *report.failures, sep="\n  ", flush=True)
        return 1
    print("all correctness checks passed", flush=True)
    return 0


def run_sections(report: Report, args, device: torch.device, rows: dict, specials: dict) -> None:
    """Sections a to e in order (the module docstring), each within the time left."""
    only = [part.strip() for part in args.select.split(",")] if args.select else None
    with report.section("a. correctness", 20, correctness=True) as go:
        if go and not only:
            check_correctness(report, args, device, rows[128], specials)
    with report.section("b. train", 40, correctness=True) as go:
        if go and not only and args.train_steps > 0:
            check_training(report, args, args.shards_128, "bert", args.train_steps)
    shards = {128: args.shards_128, 512: args.shards_512}
    workloads: dict[tuple[str, int], Workload] = {}
    with report.section("c/d. throughput", 20) as go:
        for arch, seq, who, packed, compiled in schedule(args.self_test) if go and args.steps > 0 else []:
            if seq not in rows:
                continue
            if (arch, seq) not in workloads:
                workloads[arch, seq] = workload(args, arch, shards[seq], rows[seq])
            name = measurement_name(arch, workloads[arch, seq].seq, who, packed, compiled, args)
            if only and not any(name.startswith(part) for part in only):
                continue
            measure_one(report, args, device, workloads[arch, seq], specials, who, packed, compiled)
    if device.type == "cuda" and torch.cuda.device_count() > 1:
        with report.section("e. torchrun", 60, correctness=True) as go:
            if go:
                check_torchrun(report, args, args.shards_128)
    else:
        report.table.append(f"| e. torchrun | skipped: {'one GPU' if device.type == 'cuda' else 'no GPU'} | | | |")
    with report.section("b. train (ModernBERT)", 90, correctness=True) as go:
        if go and not args.self_test and args.train_steps > 0 and (not only or "train modernbert" in only):
            check_training(report, args, args.shards_128, "modernbert", args.train_steps)


if __name__ == "__main__":
    sys.exit(main())
