"""bert_model/models/packing.py (packed / unpadded batches) and BERT on packed rows (one forward path)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertprep.bert_model.models.bert import BertConfig, BertForPreTraining
from bertprep.bert_model.models.packing import (
    TokenBudgetPacker,
    block_diagonal_mask,
    pack_documents,
    pad,
    position_ids_from_sequence_ids,
    sequence_ids_from_attention_mask,
    unpad,
)
from model_factory import tiny_bert


def _docs(lengths, seed=0, vocab=1000):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, size=n) for n in lengths]


def test_pack_documents_layout():
    docs = [np.array([11, 12, 13]), np.array([21, 22]), np.array([31, 32, 33, 34]), np.array([41])]
    out = pack_documents(docs, max_seq_length=6, pad_token_id=0)
    assert out["input_ids"].tolist() == [[11, 12, 13, 21, 22, 0], [31, 32, 33, 34, 41, 0]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 0]]
    assert out["sequence_ids"].tolist() == [[0, 0, 0, 1, 1, -1], [0, 0, 0, 0, 1, -1]]
    assert out["document_ids"].tolist() == [[0, 0, 0, 1, 1, -1], [2, 2, 2, 2, 3, -1]]
    assert all(v.dtype == np.int64 and v.shape == (2, 6) for v in out.values())


def test_pack_documents_splits_long_documents_and_skips_empty_ones():
    out = pack_documents([np.arange(1, 12), np.array([], dtype=np.int64), np.array([50, 51])], max_seq_length=4)
    # 11 tokens -> pieces of 4, 4, 3; the 2-token document does not fit beside the 3-token piece.
    assert out["input_ids"].tolist() == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 0], [50, 51, 0, 0]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 0], [0, 1, 0, 0]]
    assert out["document_ids"][:3].max() == 0 and out["document_ids"][3, 0] == 2


@pytest.mark.parametrize("max_seq_length", [1, 7, 64, 128])
def test_pack_documents_keeps_every_token_once_and_is_deterministic(max_seq_length):
    docs = _docs([0, 1, 5, 63, 64, 65, 200, 3, 17, 128, 2], seed=max_seq_length)
    out = pack_documents(docs, max_seq_length)
    again = pack_documents([list(d) for d in docs], max_seq_length)  # lists work the same
    assert all(np.array_equal(out[k], again[k]) for k in out)
    assert out["input_ids"].shape[1] == max_seq_length
    # Reading the rows in order, each document's tokens come back whole and in order: nothing lost or doubled.
    real = out["document_ids"] >= 0
    assert real.sum() == sum(len(d) for d in docs)
    flat_docs, flat_ids = out["document_ids"][real], out["input_ids"][real]
    for i, doc in enumerate(docs):
        assert np.array_equal(flat_ids[flat_docs == i], doc)
    assert np.all(np.diff(flat_docs) >= 0)  # in order
    # Padding only at the end of a row; positions restart at each document and stay below max_seq_length.
    assert np.all(np.diff(real.astype(int), axis=1) <= 0)
    assert out["position_ids"].max() < max_seq_length
    assert np.array_equal(
        position_ids_from_sequence_ids(torch.from_numpy(out["sequence_ids"])).numpy(), out["position_ids"]
    )


def test_pack_documents_aligned_arrays_and_errors():
    docs = [np.array([5, 6, 7]), np.array([8, 9])]
    out = pack_documents(
        docs, 4, aligned={"token_type_ids": ([[0, 0, 1], [0, 1]], 0), "labels": ([[-100, 6, -100], [8, -100]], -100)}
    )
    assert out["token_type_ids"].tolist() == [[0, 0, 1, 0], [0, 1, 0, 0]]
    assert out["labels"].tolist() == [[-100, 6, -100, -100], [8, -100, -100, -100]]
    with pytest.raises(ValueError, match="positive integer"):
        pack_documents(docs, 0)
    with pytest.raises(ValueError, match="1-D"):
        pack_documents([np.zeros((2, 2))], 4)
    with pytest.raises(ValueError, match="document's length"):
        pack_documents(docs, 4, aligned={"labels": ([[1, 2], [3, 4]], -100)})
    assert pack_documents([], 8)["input_ids"].shape == (0, 8)


def test_pack_documents_follows_a_given_layout():
    docs = [np.array([11, 12, 13]), np.array([21, 22]), np.array([31, 32, 33, 34]), np.array([41])]
    out = pack_documents(docs, max_seq_length=6, layout=[[2, 1], [0, 3], []])
    assert out["input_ids"].tolist() == [[31, 32, 33, 34, 21, 22], [11, 12, 13, 41, 0, 0], [0] * 6]
    assert out["document_ids"].tolist() == [[2, 2, 2, 2, 1, 1], [0, 0, 0, 3, -1, -1], [-1] * 6]
    assert out["position_ids"][0].tolist() == [0, 1, 2, 3, 0, 1]
    with pytest.raises(ValueError, match="every document exactly once"):
        pack_documents(docs, max_seq_length=6, layout=[[0, 1], [2]])
    with pytest.raises(ValueError, match="more than max_seq_length"):
        pack_documents(docs, max_seq_length=6, layout=[[0, 2], [1, 3]])


def _packer_steps(lengths, num_rows, max_seq_length, arrivals=None):
    """The steps of a packer fed ``lengths`` (keys 0, 1, ...); ``arrivals[k]``: the index of the step being
    filled when instance k came."""
    packer, steps = TokenBudgetPacker(num_rows, max_seq_length), []
    for key, length in enumerate(lengths):
        if arrivals is not None:
            arrivals.append(len(steps))
        step = packer.add(key, length)
        if step is not None:
            steps.append(step)
    return steps + packer.flush()


def test_token_budget_packer_is_first_fit_with_a_carry_of_one_step():
    # 2 rows of 10: 6 -> row 0, 7 -> row 1, 3 -> row 0 (first with room), 5 and 8 fit nowhere (carried), the
    # second carried instance completes the step; the next starts with 5, 8, then 2 fills row 0 (5 + 2).
    assert _packer_steps([6, 7, 3, 5, 8, 2], 2, 10) == [[[0, 2], [1]], [[3, 5], [4]]]


@pytest.mark.parametrize("num_rows,max_seq_length", [(1, 8), (4, 16), (8, 64)])
def test_token_budget_packer_uses_each_instance_once_within_the_budget(num_rows, max_seq_length):
    rng = np.random.default_rng(num_rows)
    lengths = [int(n) for n in rng.integers(1, max_seq_length + 1, size=500)]
    arrivals = []
    steps = _packer_steps(lengths, num_rows, max_seq_length, arrivals)
    keys = [k for step in steps for row in step for k in row]
    assert sorted(keys) == list(range(len(lengths)))  # every instance exactly once
    assert all(len(step) == num_rows for step in steps)
    assert all(sum(lengths[k] for k in row) <= max_seq_length for step in steps for row in step)
    # An instance waits at most one step: it lands in the step being filled when it came, or the next.
    step_of = {k: i for i, step in enumerate(steps) for row in step for k in row}
    assert all(step_of[k] - arrivals[k] in (0, 1) for k in range(len(lengths)))
    assert _packer_steps(lengths, num_rows, max_seq_length) == steps  # deterministic


def test_token_budget_packer_pending_replays_into_the_same_state():
    rng = np.random.default_rng(7)
    lengths = [int(n) for n in rng.integers(1, 33, size=300)]
    reference = _packer_steps(lengths, 4, 32)
    for stop in (0, 5, 37, 150, 299):
        packer, steps = TokenBudgetPacker(4, 32), []
        for key in range(stop):
            step = packer.add(key, lengths[key])
            steps += [step] if step is not None else []
        resumed = TokenBudgetPacker(4, 32)  # a new process, given the saved pending instances
        assert all(resumed.add(key, length) is None for key, length in packer.pending())
        for key in range(stop, len(lengths)):
            step = resumed.add(key, lengths[key])
            steps += [step] if step is not None else []
        assert steps + resumed.flush() == reference
    with pytest.raises(ValueError, match="does not fit"):
        TokenBudgetPacker(4, 32).add(0, 33)


def test_block_diagonal_mask():
    sequence_ids = torch.tensor([[0, 0, 0, 1, 1, -1, -1]])
    mask = block_diagonal_mask(sequence_ids)
    assert mask.shape == (1, 1, 7, 7) and mask.dtype == torch.bool
    expected = torch.zeros(7, 7, dtype=torch.bool)
    expected[:3, :3] = expected[3:5, 3:5] = True
    expected[5:, 5:] = True  # padding sees only padding: no empty row, and no real token sees it
    assert torch.equal(mask[0, 0], expected)
    assert mask[0, 0].any(dim=-1).all()
    # Window 2: one token on each side, and still never across documents.
    windowed = block_diagonal_mask(sequence_ids, window=2)[0, 0]
    assert windowed[0].tolist() == [True, True, False, False, False, False, False]
    assert windowed[2].tolist() == [False, True, True, False, False, False, False]
    assert windowed[3].tolist() == [False, False, False, True, True, False, False]
    # From an ordinary padding mask: one document per row.
    assert sequence_ids_from_attention_mask(torch.tensor([[1, 1, 0]])).tolist() == [[0, 0, -1]]


def test_unpad_and_pad_round_trip():
    out = {k: torch.from_numpy(v) for k, v in pack_documents(_docs([3, 5, 2, 7, 1]), max_seq_length=8).items()}
    flat = unpad(out["input_ids"], out["sequence_ids"])
    assert flat.cu_seqlens.tolist() == [0, 3, 8, 10, 17, 18] and flat.cu_seqlens.dtype == torch.int32
    assert flat.max_seqlen == 7
    assert flat.position_ids.tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 0, 1, 2, 3, 4, 5, 6, 0]
    real = out["sequence_ids"] >= 0
    assert torch.equal(flat.input_ids, out["input_ids"][real])
    assert torch.equal(
        pad(flat.input_ids, flat.indices, flat.batch_size, flat.seq_length), torch.where(real, out["input_ids"], 0)
    )
    assert torch.equal(flat.position_ids, out["position_ids"][real])


TINY_BERT = tiny_bert(vocab_size=99, num_attention_heads=4, intermediate_size=37)


def _packed_bert_batch(seed=0):
    lengths = [6, 9, 4, 20, 11]
    docs = _docs(lengths, seed=seed, vocab=99)
    types = [np.array([0] * (n // 2) + [1] * (n - n // 2)) for n in lengths]
    out = pack_documents(docs, 24, aligned={"token_type_ids": (types, 0)})
    return docs, types, {k: torch.from_numpy(v) for k, v in out.items()}


def test_packed_bert_equals_documents_one_by_one():
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**TINY_BERT)).eval()
    docs, types, packed = _packed_bert_batch()
    with torch.no_grad():
        out = model.bert(
            packed["input_ids"],
            packed["token_type_ids"],
            sequence_ids=packed["sequence_ids"],
            position_ids=packed["position_ids"],
        )
        seq_out, pooled = out.last_hidden_state, out.pooler_output
        assert pooled.shape == (len(docs), 32)
        for i, (doc, tt) in enumerate(zip(docs, types, strict=True)):
            alone = model.bert(torch.from_numpy(doc)[None], torch.from_numpy(tt)[None])
            assert (seq_out[packed["document_ids"] == i] - alone.last_hidden_state[0]).abs().max().item() < 1e-5, i
            assert (pooled[i] - alone.pooler_output[0]).abs().max().item() < 1e-5, i
        # Perturbing one document (and the padding) changes no other document's outputs.
        perturbed = packed["input_ids"].clone()
        perturbed[packed["document_ids"] == 1] = 3
        perturbed[packed["sequence_ids"] < 0] = 7
        seq_out2 = model.bert(
            perturbed, packed["token_type_ids"], sequence_ids=packed["sequence_ids"]
        ).last_hidden_state  # (position_ids derived from sequence_ids)
        other = (packed["document_ids"] >= 0) & (packed["document_ids"] != 1)
        assert torch.equal(seq_out[other], seq_out2[other])
        assert not torch.allclose(seq_out[packed["document_ids"] == 1], seq_out2[packed["document_ids"] == 1])


def test_packed_pretraining_loss_equals_padded_batch():
    torch.manual_seed(1)
    model = BertForPreTraining(BertConfig(**TINY_BERT)).eval()
    docs, types, packed = _packed_bert_batch(seed=2)
    labels = torch.full_like(packed["input_ids"], -100)
    labels[:, 1::3] = packed["input_ids"][:, 1::3]  # padding positions get labels too: they must not count
    nsp = torch.tensor([0, 1, 1, 0, 1])
    real = (labels != -100) & (packed["sequence_ids"] >= 0)  # padding positions' labels never count
    P = int(real.sum(1).max())
    positions = torch.zeros(len(labels), P, dtype=torch.long)
    ids = torch.full((len(labels), P), -100)
    for b in range(len(labels)):
        where = torch.nonzero(real[b]).flatten()
        positions[b, : len(where)], ids[b, : len(where)] = where, labels[b, where]
    with torch.no_grad():
        out = model(
            packed["input_ids"],
            packed["token_type_ids"],
            masked_lm_positions=positions,
            masked_lm_ids=ids,
            next_sentence_label=nsp,
            sequence_ids=packed["sequence_ids"],
        )
        # Reference: the same documents as an ordinary padded batch, one per row.
        T = max(len(d) for d in docs)
        ids = torch.zeros(len(docs), T, dtype=torch.long)
        tts, mask, lab = torch.zeros_like(ids), torch.zeros_like(ids), torch.full_like(ids, -100)
        for i, (doc, tt) in enumerate(zip(docs, types, strict=True)):
            where = packed["document_ids"] == i
            ids[i, : len(doc)], tts[i, : len(doc)], mask[i, : len(doc)] = torch.from_numpy(doc), torch.from_numpy(tt), 1
            lab[i, : len(doc)] = labels[where]
        ref = model(ids, tts, mask, masked_lm_ids=lab, next_sentence_label=nsp)
    assert out.prediction_logits.shape == (len(labels), P, 99)
    assert abs(out.mlm_loss.item() - ref.mlm_loss.item()) < 1e-5
    assert abs(out.nsp_loss.item() - ref.nsp_loss.item()) < 1e-5
    assert torch.allclose(out.seq_relationship_logits, ref.seq_relationship_logits, atol=1e-5)
