"""``train --shards gs://... | s3://...``: training from a bucket equals training from a local copy, step for step.

The buckets are real API servers (``gcp-storage-emulator``, ``moto``: ``cloud_factory.py``) reached through the
clients users run (gcsfs, s3fs); the shards are the session's ``tiny_shards`` uploaded there. Each process fetches
the shards it reads into ``--cache-dir`` (``bert_model/pretrain/remote_shards.py``), checked against the manifest.
The tests of a refusal run the real CLI in this process (``cli_factory.invoke``: click's runner, bounded in time,
the test's environment with the emulator's address): they assert its exit status, its one ``Error:`` line and
what is on disk, none of which needs a process of its own (which would cost ~3 s of CPU to import torch); the
endpoint is probed from the environment at each run, so no client a previous test made answers for it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import pytest

from cli_factory import error_line, invoke
from cloud_factory import upload_folder
from conftest import need_module
from model_factory import tiny_train_config

need_module("torch")
need_module("gcsfs")
need_module("s3fs")


def _losses(run: Path) -> list[dict]:
    """Every metrics.jsonl line's step and losses (the training curve)."""
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in x.items() if k in ("step", "loss", "mlm_loss", "nsp_loss")} for x in lines if "loss" in x]


def _weights(checkpoint: str) -> dict:
    from safetensors.torch import load_file

    return load_file(os.path.join(checkpoint, "model.safetensors"))


def _same_weights(a: str, b: str) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        assert wa[name].equal(wb[name]), name


def _train(shards, out: Path, cache: Path | None, **overrides):
    from bertprep.bert_model.pretrain.trainer import train

    cache_dir = {"cache_dir": str(cache)} if cache is not None else {}
    return train(tiny_train_config(shards, out, log_every=1, **cache_dir, **overrides))


def _cached_shards(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.rglob("*.arrow"))


@pytest.fixture
def gs_shards(gcs, tiny_shards) -> str:
    """The session's tiny training shards (4 files of 40 rows) in a fresh GCS bucket: ``gs://NAME/train``."""
    upload_folder(tiny_shards / "train", f"{gcs}/train")
    return f"{gcs}/train"


@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_train_from_gs_equals_train_from_the_local_copy_step_for_step(
    gs_shards, tiny_shards, tmp_path, one_torch_thread
):
    common = dict(max_steps=20, num_workers=2)
    local = _train(tiny_shards / "train", tmp_path / "local", None, **common)
    remote = _train(gs_shards, tmp_path / "remote", tmp_path / "cache", **common)
    assert len(_losses(tmp_path / "local")) == 20
    assert _losses(tmp_path / "remote") == _losses(tmp_path / "local")
    _same_weights(remote.checkpoint, local.checkpoint)
    state = json.loads(Path(remote.checkpoint, "state.json").read_text())
    assert state["data"]["shards"] == gs_shards  # the URL as given, not made a local path


@pytest.mark.slow  # ~6 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_train_from_s3_equals_train_from_the_local_copy(s3, tiny_shards, tmp_path, one_torch_thread):
    """The training and the held-out shards in the bucket: the same losses and eval figures as from the folders."""
    upload_folder(tiny_shards / "train", f"{s3}/train")
    upload_folder(tiny_shards / "eval", f"{s3}/eval")
    common = dict(max_steps=6, eval_every=3, eval_batches=2)
    local = _train(tiny_shards / "train", tmp_path / "local", None, eval_shards=str(tiny_shards / "eval"), **common)
    remote = _train(f"{s3}/train", tmp_path / "remote", tmp_path / "cache", eval_shards=f"{s3}/eval", **common)
    assert _losses(tmp_path / "remote") == _losses(tmp_path / "local")
    figures = ("step", "loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "sequences")
    evals = [
        [{k: x[k] for k in figures} for x in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
         if x.get("split") == "eval"]
        for run in (tmp_path / "local", tmp_path / "remote")
    ]  # fmt: skip
    assert len(evals[0]) == 2 and evals[1] == evals[0]
    _same_weights(remote.checkpoint, local.checkpoint)


@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_resume_from_a_bucket_equals_the_uninterrupted_run(gs_shards, tmp_path, one_torch_thread):
    common = dict(max_steps=8, num_workers=1)
    whole = _train(gs_shards, tmp_path / "whole", tmp_path / "cache", **common)
    first = _train(gs_shards, tmp_path / "parts", tmp_path / "cache2", stop_after_steps=4, **common)
    assert first.step == 4
    second = _train(gs_shards, tmp_path / "parts", tmp_path / "cache2", resume=str(tmp_path / "parts"), **common)
    assert second.step == 8
    assert _losses(tmp_path / "parts") == _losses(tmp_path / "whole")
    _same_weights(second.checkpoint, whole.checkpoint)


def _object_names(url: str) -> list[str]:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    fs.invalidate_cache()
    return sorted(p.rsplit("/", 1)[-1] for p in fs.ls(path, detail=False))


def _no_temporary_files(cache: Path) -> None:
    assert [p.name for p in cache.rglob("*") if p.name.startswith(".")] == []


def test_a_cached_shard_that_differs_from_the_manifest_is_fetched_again(gs_shards, tmp_path, one_torch_thread):
    first = _train(gs_shards, tmp_path / "first", tmp_path / "cache", max_steps=4)
    cached = sorted((tmp_path / "cache").rglob("*.arrow"))
    assert cached
    good = {p: p.read_bytes() for p in cached}
    for p in cached:
        p.write_bytes(b"\0" * len(good[p]))  # the local disk damaged them
    again = _train(gs_shards, tmp_path / "again", tmp_path / "cache", max_steps=4)
    assert _losses(tmp_path / "again") == _losses(tmp_path / "first")
    _same_weights(again.checkpoint, first.checkpoint)
    assert all(p.read_bytes() == good[p] for p in cached if p.exists())


def test_a_shard_changed_in_the_bucket_is_refused_in_one_line_naming_it(gcs, tiny_shards, tmp_path):
    from bertprep.bert_model.pretrain.data import epoch_shard_order
    from bertprep.bert_model.pretrain.trainer import ShardReadError

    upload_folder(tiny_shards / "train", f"{gcs}/train")
    names = _object_names(f"{gcs}/train")
    shards = [n for n in names if n.endswith(".arrow")]
    first = shards[epoch_shard_order(len(shards), 0, 0, True)[0]]  # the first shard read (seed 0)
    import fsspec

    with fsspec.open(f"{gcs}/train/{first}", "wb") as f:  # other bytes than the manifest's sha256
        f.write((tiny_shards / "train" / shards[-1 if first != shards[-1] else 0]).read_bytes())
    with pytest.raises(ShardReadError) as err:
        _train(f"{gcs}/train", tmp_path / "run", tmp_path / "cache", max_steps=2)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{gcs}/train/{first}: sha256 differs from the one in {gcs}/train/manifest.json")
    assert "make the shards again" in message
    assert first not in _cached_shards(tmp_path / "cache")
    _no_temporary_files(tmp_path / "cache")


@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_an_object_deleted_mid_run_stops_in_one_line_with_a_checkpoint(gcs, tiny_shards, tmp_path):
    """The second shard of the stream is gone when the loader reaches it: one line naming the object and the
    fix, a checkpoint of the last finished step, a non-zero exit, no half-written cache file."""
    from bertprep.bert_model.pretrain.data import epoch_shard_order

    upload_folder(tiny_shards / "train", f"{gcs}/train")
    shards = [n for n in _object_names(f"{gcs}/train") if n.endswith(".arrow")]
    second = shards[epoch_shard_order(len(shards), 0, 0, True)[1]]
    import fsspec

    fsspec.open(f"{gcs}/train", "rb").fs.rm(f"{gcs}/train/{second}")
    out, cache = tmp_path / "run", tmp_path / "cache"
    proc = invoke(
        "train", "--shards", f"{gcs}/train", "-o", out, "--cache-dir", cache, "--preset", "tiny", "--hidden-size",
        32, "--num-attention-heads", 2, "--batch-size", 8, "--shuffle-buffer-size", 8, "--max-steps", 20,
        "--warmup-steps", 0, "--num-workers", 0, "--save-every", 0, "--no-progress", timeout=300,
    )  # fmt: skip
    line = error_line(proc, status=1)
    assert f"{gcs}/train/{second} does not exist (listed in {gcs}/train/manifest.json)" in line
    assert "make the shards again" in line and f"continue with --resume {out}" in line
    assert (out / "checkpoints").is_dir()
    assert second not in _cached_shards(cache)
    _no_temporary_files(cache)


def test_a_bucket_that_does_not_exist_is_named_in_one_line(gcs, tmp_path):
    proc = invoke(
        "train", "--shards", "gs://no-such-bucket-bertprep/train", "-o", tmp_path / "run", "--cache-dir",
        tmp_path / "cache", "--preset", "tiny", "--max-steps", 2, "--warmup-steps", 0, "--no-progress", timeout=120,
    )  # fmt: skip
    line = error_line(proc, status=1)
    assert "gs://no-such-bucket-bertprep/train/manifest.json does not exist" in line
    assert "check the bucket and folder name" in line


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_an_endpoint_that_does_not_answer_is_named_in_seconds(tmp_path, scheme):
    """Before: gcsfs retried a closed emulator port for 35 s (storage.googleapis.com without a network: 51 s), s3fs
    for 10 s, before the one line. Now the endpoint is probed first, as make-shards probes its paths."""
    dead = "http://127.0.0.1:9"  # (the discard port: nothing listens there)
    endpoint = {"STORAGE_EMULATOR_HOST": dead} if scheme == "gs" else {"AWS_ENDPOINT_URL_S3": dead}
    start = time.monotonic()
    proc = invoke(
        "train", "--shards", f"{scheme}://bucket/train", "-o", tmp_path / "run", "--cache-dir", tmp_path / "cache",
        "--preset", "tiny", "--max-steps", 2, "--warmup-steps", 0, "--no-progress", timeout=120,
        env={"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", **endpoint},
    )  # fmt: skip
    line = error_line(proc, status=1)
    assert f"{scheme}://bucket/train: cannot reach 127.0.0.1:9" in line and "emulator or endpoint is running" in line
    assert time.monotonic() - start < 30 and not (tmp_path / "run").exists()


def test_a_cache_smaller_than_the_shards_evicts_and_still_trains(gs_shards, tiny_shards, tmp_path, one_torch_thread):
    shard_bytes = max(p.stat().st_size for p in (tiny_shards / "train").glob("*.arrow"))
    local = _train(tiny_shards / "train", tmp_path / "local", None, max_steps=12)
    small = _train(gs_shards, tmp_path / "remote", tmp_path / "cache", max_steps=12, cache_max_gb=shard_bytes / 1e9)
    assert _losses(tmp_path / "remote") == _losses(tmp_path / "local")
    _same_weights(small.checkpoint, local.checkpoint)
    assert 1 <= len(_cached_shards(tmp_path / "cache")) <= 2  # the one just fetched, and a prefetch landing


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_fetches_only_the_shards_it_reads(gs_shards, tmp_path, rank):
    from bertprep.bert_model.pretrain.data import ShardDataset
    from bertprep.bert_model.pretrain.remote_shards import open_shard_info

    info = open_shard_info(gs_shards, str(tmp_path / "cache"))
    dataset = ShardDataset(
        gs_shards, batch_size=8, rank=rank, world_size=2, num_workers=0, info=info, infinite=False,
        shuffle_buffer_size=8,
    )  # fmt: skip
    rows = sum(len(batch["input_ids"]) for batch, _ in dataset)
    read = [info.shard_files[i].rsplit("/", 1)[-1] for i in dataset.stream_shards(dataset.stream_index(0), 0)]
    assert rows == sum(info.shard_rows[i] for i in dataset.stream_shards(dataset.stream_index(0), 0))
    assert _cached_shards(tmp_path / "cache") == sorted(read) and len(read) == 2


def test_a_cached_shard_is_hashed_once_per_process_however_often_it_is_read(tmp_path, monkeypatch):
    """Reading a cached shard marks it as just used (its mtime, the eviction order); that mark must not make the
    next read hash the whole file again (before: every read after the first re-hashed it, prefetch checks too)."""
    import hashlib

    from bertprep.bert_model.pretrain import remote_shards
    from bertprep.core import schema

    data = b"shard bytes" * 1000
    cache = remote_shards.ShardCache(
        url="gs://no-such-bucket/shards",  # never reached: the file is in the cache already
        cache_dir=str(tmp_path),
        max_bytes=10**9,
        files=("shard-00000-of-00001.arrow",),
        sha256=(hashlib.sha256(data).hexdigest(),),
    )
    os.makedirs(cache.folder)
    Path(cache.local_path(0)).write_bytes(data)
    hashed = []
    real = schema.sha256_file
    monkeypatch.setattr(schema, "sha256_file", lambda path: hashed.append(path) or real(path))
    for _ in range(3):
        assert cache.fetch(0) == cache.local_path(0)
        cache.prefetch(0)  # (cached: starts nothing)
    assert hashed == [cache.local_path(0)]


def _stop_at_first_shard_fetch(monkeypatch, server) -> threading.Event:
    """Stop ``server`` when the first shard download begins (the manifest and vocab already read: the run is
    under way); the event returned is set once it is stopped."""
    from bertprep.bert_model.pretrain import remote_shards

    real, stopped, lock = remote_shards._download, threading.Event(), threading.Lock()

    def download(url, *args, **kwargs):
        with lock:
            if url.endswith(".arrow") and not stopped.is_set():
                server.stop()
                stopped.set()
        return real(url, *args, **kwargs)

    monkeypatch.setattr(remote_shards, "_download", download)
    return stopped


def test_train_from_a_bucket_rides_out_an_outage_of_the_store(
    gcs_to_restart, tiny_shards, tmp_path, monkeypatch, caplog, one_torch_thread
):
    """The storage server goes away as train fetches its first shard and is back a second later (restarted on
    its port, objects kept): gcsfs retries with back-off, and the losses are the local copy's, step for step.
    (No loader worker process: the shards are fetched in this one, where the test stops the server.)"""
    server, bucket = gcs_to_restart
    upload_folder(tiny_shards / "train", f"{bucket}/train")
    common = dict(max_steps=6, num_workers=0)
    local = _train(tiny_shards / "train", tmp_path / "local", None, **common)
    stopped = _stop_at_first_shard_fetch(monkeypatch, server)
    restarter = threading.Thread(target=lambda: stopped.wait(60) and not time.sleep(1.0) and server.restart())
    restarter.start()  # (from this thread: the fetch may run in a prefetching daemon thread)
    caplog.set_level(logging.DEBUG, logger="gcsfs")
    try:
        remote = _train(f"{bucket}/train", tmp_path / "remote", tmp_path / "cache", **common)
    finally:
        stopped.set()
        restarter.join()
    assert server.proc.poll() is None  # the restarted server answered
    assert _losses(tmp_path / "remote") == _losses(tmp_path / "local")
    _same_weights(remote.checkpoint, local.checkpoint)
    assert any("retrying after exception" in r.getMessage() for r in caplog.records)  # gcsfs's own retries
    _no_temporary_files(tmp_path / "cache")


def test_a_store_gone_mid_run_stops_in_one_line_with_a_checkpoint(s3_to_stop, tiny_shards, tmp_path, monkeypatch):
    """The S3 server of this test goes away for good as train fetches its second shard: one line naming the
    object, what to check and how to continue, a checkpoint of the last finished step, no half-written cache
    file. (botocore retries the connection first: ``AWS_MAX_ATTEMPTS``, a user's setting, is 1 here to keep the
    test short.)"""
    from bertprep.bert_model.pretrain import remote_shards
    from bertprep.bert_model.pretrain.data import epoch_shard_order
    from bertprep.bert_model.pretrain.trainer import ShardReadError

    server, bucket = s3_to_stop
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    upload_folder(tiny_shards / "train", f"{bucket}/train")
    shards = sorted(p.name for p in (tiny_shards / "train").glob("*.arrow"))
    second = shards[epoch_shard_order(len(shards), 0, 0, True)[1]]
    real = remote_shards._download

    def download(url, *args, **kwargs):
        if url.endswith(second):
            server.stop()
        return real(url, *args, **kwargs)

    monkeypatch.setattr(remote_shards, "_download", download)
    out, cache = tmp_path / "run", tmp_path / "cache"
    with pytest.raises(ShardReadError) as err:
        _train(f"{bucket}/train", out, cache, max_steps=20, num_workers=0, save_every=0)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"cannot read {bucket}/train/{second}: ")
    assert "check the credentials and network" in message and f"--resume {out}" in message
    assert (out / "checkpoints").is_dir()
    assert second not in _cached_shards(cache)
    _no_temporary_files(cache)


def test_the_casing_of_bucket_shards_is_read_from_the_manifest_the_cache_keeps(
    gs_shards, tmp_path, caplog, one_torch_thread
):
    """The manifest copy a run keeps in its cache gives the casing of shards in a bucket (before: unknown, so never
    checked): a checkpoint trained from them records it (as one trained from a local folder does), and a model
    trained cased is refused on these uncased shards before any step, naming the bucket URL."""
    transformers = need_module("transformers")
    from bertprep.bert_model.hf.interop import load_model_source
    from bertprep.bert_model.pretrain.trainer import train
    from model_factory import init_from_train_config, tiny_bert
    from shard_factory import make_vocab

    cache = tmp_path / "cache"
    with caplog.at_level(logging.INFO):
        run = _train(gs_shards, tmp_path / "run", cache, max_steps=2, num_workers=0)
    assert "holds the held-out set" not in caplog.text  # (no eval/ beside these shards)
    source = load_model_source(run.checkpoint)
    assert (source.do_lower_case, source.strip_accents) == (True, True)  # the factory's shards are uncased

    cased = tmp_path / "cased-model"
    config = transformers.BertConfig(**tiny_bert(vocab_size=64, intermediate_size=64, pad_token_id=0))
    transformers.BertModel(config).save_pretrained(cased)
    (cased / "vocab.txt").write_text("".join(t + "\n" for t in make_vocab(64)), encoding="utf-8")
    (cased / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}), encoding="utf-8")
    settings = dict(cache_dir=str(cache), num_workers=0, max_steps=2)
    with pytest.raises(ValueError) as err:
        train(init_from_train_config(gs_shards, tmp_path / "from-cased", cased, **settings))
    assert str(err.value) == (
        f"shards {gs_shards} were made with do_lower_case=True but {cased} was trained with do_lower_case=False; "
        "make the shards with --no-do-lower-case"
    )
    assert not (tmp_path / "from-cased" / "checkpoints").exists()


def test_a_held_out_set_beside_bucket_shards_is_pointed_at(gcs, tiny_shards, tmp_path, caplog, one_torch_thread):
    """make-shards --eval-fraction leaves eval/ beside the training shards: train without --eval-shards says so
    for a bucket as for a local folder."""
    upload_folder(tiny_shards / "train", f"{gcs}/shards")
    upload_folder(tiny_shards / "eval", f"{gcs}/shards/eval")
    with caplog.at_level(logging.INFO):
        _train(f"{gcs}/shards", tmp_path / "run", tmp_path / "cache", max_steps=2, num_workers=0)
    held_out = f"{gcs}/shards/eval"
    assert f"{held_out} holds the held-out set made with these shards; pass --eval-shards {held_out}" in caplog.text


def test_a_full_cache_disk_is_named_as_such(gs_shards, tmp_path, monkeypatch):
    """The cache's disk fills up while a shard is fetched: one line that says so, names the cache folder and how
    to move it (before: "No space left on device; check the credentials and network"), and no partial file."""
    import errno

    from bertprep.bert_model.pretrain import remote_shards

    def disk_full(src, out, *args):
        out.write(src.read(16))
        raise OSError(errno.ENOSPC, "No space left on device")

    cache = tmp_path / "cache"
    _, shard_cache = remote_shards.open_cache(gs_shards, str(cache))
    monkeypatch.setattr(remote_shards, "_copy", disk_full)
    with pytest.raises(remote_shards.RemoteShardError) as err:
        shard_cache.fetch(0)
    message = str(err.value)
    assert message == (
        f"cannot fetch {gs_shards}/{shard_cache.files[0]}: no space left on the disk of the shard cache {cache}; free "
        "space there, lower --cache-max-gb, or move the cache to a larger disk with --cache-dir (or XDG_CACHE_HOME)"
    )
    assert _cached_shards(cache) == []
    _no_temporary_files(cache)


def test_the_cache_does_not_serve_a_shard_overwritten_in_the_bucket(gs_shards, tmp_path):
    """A run that starts after a shard was written again in the bucket fetches it again (its generation differs
    from the cached copy's) and names it, instead of training on the copy the cache kept."""
    from bertprep.bert_model.pretrain import remote_shards
    from bertprep.core import storage

    _, first = remote_shards.open_cache(gs_shards, str(tmp_path / "cache"))
    kept = first.fetch(1)
    with storage.open(f"{gs_shards}/{first.files[1]}", "wb") as out:
        out.write(storage.read_bytes(f"{gs_shards}/{first.files[0]}"))
    _, second = remote_shards.open_cache(gs_shards, str(tmp_path / "cache"))
    assert second.fetch(0) == first.local_path(0)  # (unchanged: fetched, then served from the cache)
    with pytest.raises(remote_shards.RemoteShardError, match="sha256 differs from the one in"):
        second.fetch(1)
    assert not os.path.exists(kept)
