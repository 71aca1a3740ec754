"""Attention for every encoder and batch layout, in one place: which tokens may attend to which, and the kernel.

An encoder builds one :class:`AttentionPlan` per forward pass from the batch's layout and calls
``plan.attend(q, k, v, window, dropout_p)`` in every layer. The layouts (``packing.py``):

* no mask: every token of a row is real and the row is one sequence;
* padded: ``attention_mask`` (B, T), one sequence per row followed by padding;
* packed: ``sequence_ids`` (B, T), several sequences per row (0, 1, ... within the row, -1 on padding); a token
  attends only to the tokens of its own sequence.

A ``window`` (ModernBERT's local layers: ``local_attention``, the whole window) further limits a token to the
keys at most ``window // 2`` positions away within its sequence.

The kernels (``attn_implementation``, the name Hugging Face ``transformers`` uses for the same choice):

* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` with a boolean mask, the key-padding mask
  (B, 1, 1, T) of a padded batch or the block-diagonal mask (B, 1, T, T) of a packed one, intersected with the
  band of a window. The reference: every device (the ``meta`` device too), every dtype, attention dropout. It
  does the full T x T work of every row whatever the mask.
* ``varlen``: FlashAttention-2's variable-length kernel as PyTorch ships it (the kernel behind
  ``torch.nn.attention.varlen.varlen_attn``; CUDA, compute capability 8.0+, bf16 / fp16). The (B, T) rows are
  one stream of B * T tokens cut into segments at ``cu_seqlens`` (every sequence, and every run of padding, a
  segment of its own), so no token attends across a sequence boundary and no masked block is computed; the
  window is the kernel's ``(left, right)``. No copy, no gather: padding runs are attended among themselves and
  never read.
* ``flash_attention_2``: the same through the ``flash_attn`` package's ``flash_attn_varlen_func``, where it is
  installed (as ``transformers``' ModernBERT uses it).
* ``flex_attention``: ``torch.nn.attention.flex_attention`` with a document block mask (and band): masked blocks
  are skipped; CPU and CUDA (compiled on CUDA); no attention dropout.
* ``auto``: ``flash_attention_2`` or ``varlen`` where the device runs them and attention runs in bf16 / fp16,
  else ``sdpa`` (:func:`resolve_attn_implementation`).

Every kernel gives the same outputs at the real tokens (``tests/bert_model/models/test_attention.py``: equal to
``sdpa`` within 1e-5 in fp32 for ``flex_attention`` on the CPU; ``benchmarks/gpu_check.sh`` checks ``varlen``
on a GPU). What padding positions compute differs and is never read.

Shapes: B rows, T row length, nh heads, hs head size, S segments of the flattened stream.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from bertprep.bert_model.models.bert_config import ATTN_IMPLEMENTATIONS  # (torch-free, for the CLI's --help)
from bertprep.bert_model.models.packing import (
    PADDING_SEQUENCE_ID,
    block_diagonal_mask,
    cu_seqlens_from_sequence_ids,
    position_ids_from_sequence_ids,
    sequence_starts_from_sequence_ids,
    sliding_window_band,
)

logger = logging.getLogger("bertprep.attention")


#: Kernels that need CUDA and half precision (FlashAttention-2).
FLASH_KERNELS = ("varlen", "flash_attention_2")


def flash_attn_installed() -> bool:
    """Whether the ``flash_attn`` package (Dao-AILab FlashAttention-2) can be imported."""
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return True


def flash_kernel_unavailable(device: torch.device) -> str | None:
    """Why PyTorch's FlashAttention-2 kernel cannot run on ``device`` (None when it can): it needs CUDA and a
    GPU of compute capability 8.0 or newer (Ampere, Ada, Hopper)."""
    if device.type != "cuda":
        return f"FlashAttention needs a CUDA device, not {device.type}"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 8:
        return f"FlashAttention needs compute capability 8.0+, this GPU has {major}.{minor}"
    return None


def resolve_attn_implementation(requested: str, device: torch.device, half_precision: bool) -> str:
    """The kernel for ``requested`` (one of :data:`ATTN_IMPLEMENTATIONS`) on ``device``.

    ``auto`` is ``flash_attention_2`` when ``flash_attn`` is installed, else ``varlen``, on a CUDA GPU of compute
    capability 8.0+ when attention runs in bf16 / fp16 (``half_precision``: bf16 autocast); ``sdpa`` otherwise
    (the CPU, fp32, older GPUs). An explicit choice is checked, not changed.

    Raises:
        ValueError: an unknown name, or a FlashAttention kernel on a device or precision that cannot run it
            (the message says which and what to use instead).
    """
    if requested not in ATTN_IMPLEMENTATIONS:
        raise ValueError(f"attn_implementation must be one of {', '.join(ATTN_IMPLEMENTATIONS)}, got {requested!r}")
    why_not = flash_kernel_unavailable(device)
    if requested == "auto":
        if why_not is None and half_precision:
            return "flash_attention_2" if flash_attn_installed() else "varlen"
        return "sdpa"
    if requested in FLASH_KERNELS:
        if why_not is not None:
            instead = "sdpa or flex_attention" if device.type == "cuda" else "sdpa"  # (flex trains on CUDA only)
            raise ValueError(f"--attn-implementation {requested}: {why_not}; use {instead}")
        if not half_precision:
            raise ValueError(
                f"--attn-implementation {requested} runs in bf16 / fp16 only; use --precision bf16 (or auto), or sdpa"
            )
        if requested == "flash_attention_2" and not flash_attn_installed():
            raise ValueError("--attn-implementation flash_attention_2 needs the flash_attn package; or use varlen")
    return requested


def configure_attention(model: torch.nn.Module, requested: str, device: torch.device, half_precision: bool) -> str:
    """Resolve ``requested`` for ``device`` (:func:`resolve_attn_implementation`) and set it on every encoder in
    ``model`` (the modules with an ``attn_implementation`` attribute); returns the kernel's name.

    Raises:
        ValueError: see :func:`resolve_attn_implementation`; or ``flex_attention`` on a model that trains with
            attention dropout (the kernel has none), or that trains on the CPU (PyTorch has no flex backward
            there: ``NotImplementedError`` at the first step).
    """
    implementation = resolve_attn_implementation(requested, device, half_precision)
    encoders = [m for m in model.modules() if hasattr(m, "attn_implementation")]
    if implementation == "flex_attention":
        dropout = [p for m in model.modules() for p in [getattr(m, "dropout_p", 0.0)] if p]
        if dropout and model.training:
            raise ValueError(
                f"--attn-implementation flex_attention has no attention dropout (the model has {dropout[0]}): "
                "set --attention-probs-dropout-prob 0, or use sdpa or varlen"
            )
        if model.training and device.type == "cpu":
            raise ValueError(
                "--attn-implementation flex_attention cannot train on the CPU (PyTorch has no flex attention "
                "backward there); use sdpa, or flex_attention on a CUDA GPU"
            )
    for encoder in encoders:
        setattr(encoder, "attn_implementation", implementation)  # noqa: B010 (any module that declares it)
    return implementation


@functools.cache
def _log_kernel_once(implementation: str, device_type: str, reason: str) -> None:
    logger.info("attention kernel: %s on %s%s", implementation, device_type, f" ({reason})" if reason else "")


@dataclass
class AttentionPlan:
    """Which keys each query may attend to in one batch, and the kernel that computes it.

    Build it with :meth:`build`; every layer then calls :meth:`attend`. Dense masks and block masks are made
    once per window width and reused by every layer of that width.
    """

    implementation: str
    """The kernel (one of :data:`ATTN_IMPLEMENTATIONS` but ``auto``)."""
    batch_size: int
    seq_length: int
    device: torch.device
    attention_mask: torch.Tensor | None = None
    """bool (B, T): padded layout, True = real token."""
    sequence_ids: torch.Tensor | None = None
    """int64 (B, T): packed layout, sequence number within the row, -1 on padding."""
    cu_seqlens: torch.Tensor | None = None
    """int32 (S + 1,): segment boundaries of the flattened (B * T) stream (varlen kernels)."""
    _masks: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        implementation: str,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        sequence_ids: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
    ) -> AttentionPlan:
        """The plan of a (B, T) batch: packed when ``sequence_ids`` is given, padded when ``attention_mask`` is,
        else every token real, one sequence per row.

        Args:
            implementation: the kernel (``auto`` is taken as ``sdpa``: resolve it first with
                :func:`resolve_attn_implementation`).
            input_ids: int (B, T); only its shape and device are used.
            attention_mask: (B, T), 1 / True = real token.
            sequence_ids: int (B, T), -1 on padding (a given ``attention_mask`` also marks padding).
            cu_seqlens: int32 (S + 1,), the varlen segment boundaries when the data loader computed them
                (``packing.cu_seqlens_from_sequence_ids``); derived on the device otherwise (one host sync).
        """
        if implementation == "auto":
            implementation = "sdpa"
        B, T = input_ids.shape
        mask = None if attention_mask is None else attention_mask.bool()
        if sequence_ids is not None and mask is not None:
            sequence_ids = sequence_ids.masked_fill(~mask, PADDING_SEQUENCE_ID)
        return cls(implementation, B, T, input_ids.device, mask, sequence_ids, cu_seqlens)

    @property
    def packed(self) -> bool:
        return self.sequence_ids is not None

    def document_ids(self) -> torch.Tensor:
        """int64 (B, T): the sequence of each token (-1 on padding) for every layout."""
        if self.sequence_ids is not None:
            return self.sequence_ids.long()
        if self.attention_mask is not None:
            return torch.where(self.attention_mask, 0, PADDING_SEQUENCE_ID).long()
        return torch.zeros((self.batch_size, self.seq_length), dtype=torch.long, device=self.device)

    def position_ids(self) -> torch.Tensor:
        """int64 (B, T) default positions: 0..T-1 in every row (padded layout, as the original and
        ``transformers``), restarting at 0 at each sequence (packed layout)."""
        if self.sequence_ids is not None:
            return position_ids_from_sequence_ids(self.sequence_ids)
        return torch.arange(self.seq_length, device=self.device).expand(self.batch_size, -1)

    def sequence_starts(self) -> torch.Tensor:
        """int64 (D,): flat index (row * T + column) of each sequence's first token, row-major. A padded batch's
        are the rows' first tokens; a packed batch's are found on the device (one host sync: pass the loader's
        ``sequence_starts`` to avoid it)."""
        if self.sequence_ids is None:
            return torch.arange(self.batch_size, device=self.device) * self.seq_length
        return sequence_starts_from_sequence_ids(self.sequence_ids)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None, dropout_p: float):
        """Attention of one layer.

        Args:
            q, k, v: float (B, T, nh, hs), in the layer's compute dtype.
            window: total sliding-window width (keys at most ``window // 2`` positions away), None = global.
            dropout_p: attention-probability dropout (0 in evaluation).
        Returns:
            float (B, T, nh, hs); rows at padding positions hold values that are never read.
        Raises:
            ValueError: ``flex_attention`` with ``dropout_p`` > 0 (the kernel has no dropout).
        """
        implementation = self.implementation
        if implementation in FLASH_KERNELS and q.dtype not in (torch.float16, torch.bfloat16):
            implementation = "sdpa"  # (fp32 evaluation outside autocast: FlashAttention has no fp32 path)
        if not torch.compiler.is_compiling():  # (logging would break the compiled graph; it ran eagerly first)
            _log_kernel_once(implementation, self.device.type, "" if implementation == self.implementation else "fp32")
        if implementation == "sdpa":
            return self._sdpa(q, k, v, window, dropout_p)
        if implementation == "flex_attention":
            return self._flex(q, k, v, window, dropout_p)
        return self._varlen(q, k, v, window, dropout_p, implementation)

    # --------------------------------------------------------------------------------------------- kernels

    def _dense_mask(self, window: int | None) -> torch.Tensor | None:
        """bool mask for SDPA, True = may attend: None, (1, 1, T, T), (B, 1, 1, T) or (B, 1, T, T)."""
        if window in self._masks:
            return self._masks[window]
        mask: torch.Tensor | None
        if self.sequence_ids is not None:
            mask = block_diagonal_mask(self.sequence_ids, window)  # (B, 1, T, T): same sequence (and band)
        else:
            mask = None if self.attention_mask is None else self.attention_mask[:, None, None, :]  # (B, 1, 1, T)
            if window is not None:
                band = sliding_window_band(self.seq_length, window, self.device)[None, None]  # (1, 1, T, T)
                mask = band if mask is None else mask & band  # (B or 1, 1, T, T)
        self._masks[window] = mask
        return mask

    def _sdpa(self, q, k, v, window, dropout_p):
        y = F.scaled_dot_product_attention(  # (B, nh, T, hs)
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=self._dense_mask(window),
            dropout_p=dropout_p,
        )
        return y.transpose(1, 2)  # (B, T, nh, hs)

    def _block_mask(self, window: int | None):
        key = ("flex", window)
        if key not in self._masks:
            from torch.nn.attention.flex_attention import create_block_mask

            ids = self.document_ids()  # (B, T)

            def mask_mod(b, h, q_idx, kv_idx):
                same = ids[b, q_idx] == ids[b, kv_idx]
                if window is None:
                    return same
                return same & ((q_idx - kv_idx).abs() <= window // 2)

            self._masks[key] = create_block_mask(
                mask_mod, self.batch_size, None, self.seq_length, self.seq_length, device=self.device
            )
        return self._masks[key]

    def _flex(self, q, k, v, window, dropout_p):
        if dropout_p > 0:
            raise ValueError(
                "flex_attention has no attention dropout: set --attention-probs-dropout-prob 0, or use "
                "--attn-implementation sdpa or varlen"
            )
        y = _flex_attention(self.device.type)(  # (B, nh, T, hs)
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=self._block_mask(window)
        )
        return y.transpose(1, 2)  # (B, T, nh, hs)

    def _segments(self) -> torch.Tensor:
        if self.cu_seqlens is None:
            self.cu_seqlens = cu_seqlens_from_sequence_ids(self.document_ids())  # (S + 1,)
        return self.cu_seqlens.to(device=self.device, dtype=torch.int32)

    def _varlen(self, q, k, v, window, dropout_p, implementation):
        B, T, nh, hs = q.shape
        cu = self._segments()
        left = right = -1 if window is None else window // 2
        flat = [t.reshape(B * T, nh, hs) for t in (q, k, v)]  # (B*T, nh, hs): a view, no copy
        if implementation == "flash_attention_2":
            from flash_attn import flash_attn_varlen_func

            y = flash_attn_varlen_func(*flat, cu, cu, T, T, dropout_p=dropout_p, window_size=(left, right))
        else:
            y = flash_varlen_attention(*flat, cu, T, dropout_p, (left, right))
        return y.view(B, T, nh, hs)


@functools.cache
def _flex_attention(device_type: str):
    """``flex_attention``, compiled on CUDA (its eager form materialises the scores; on the CPU the eager form
    serves tests and small runs, and compiling the whole model with ``--compile`` fuses it there too)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention) if device_type == "cuda" else flex_attention


def flash_varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    dropout_p: float = 0.0,
    window_size: tuple[int, int] = (-1, -1),
) -> torch.Tensor:
    """FlashAttention-2 over variable-length segments, non-causal, through PyTorch's own kernel.

    ``torch.nn.attention.varlen.varlen_attn`` is the public form of this kernel but fixes the attention dropout
    at 0 (pytorch/pytorch#179382; the pull request that adds ``dropout_p``, #179390, was closed unmerged), and
    BERT trains with attention-probability dropout 0.1. So this calls the ATen operator underneath it,
    ``aten::_flash_attention_forward``, which takes ``dropout_p`` and whose registered backward replays the
    dropout mask from the forward's RNG state. Replace it with ``varlen_attn(..., dropout_p=...)`` once
    PyTorch's public function takes one.

    Args:
        q, k, v: bf16 / fp16 (N, nh, hs) on a CUDA device of compute capability 8.0+.
        cu_seqlens: int32 (S + 1,), segment boundaries (0 first, N last).
        max_seqlen: an upper bound of the segment lengths (the row length T).
        dropout_p: attention-probability dropout.
        window_size: ``(left, right)`` keys a query may see on each side, -1 = unlimited.
    Returns:
        (N, nh, hs), the dtype of ``q``.
    """
    out = torch.ops.aten._flash_attention_forward(
        q,
        k,
        v,
        cu_seqlens,
        cu_seqlens,
        max_seqlen,
        max_seqlen,
        dropout_p,
        False,  # is_causal
        False,  # return_debug_mask
        window_size_left=window_size[0],
        window_size_right=window_size[1],
    )
    return out[0]


__all__ = [
    "ATTN_IMPLEMENTATIONS",
    "FLASH_KERNELS",
    "AttentionPlan",
    "configure_attention",
    "flash_attn_installed",
    "flash_kernel_unavailable",
    "flash_varlen_attention",
    "resolve_attn_implementation",
]
