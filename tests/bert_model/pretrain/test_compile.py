"""``train --compile``: the model traced whole by ``torch.compile`` (no graph break in any layout), the same
losses as eager, and an exact resume of a compiled run.

These tests compile with the ``aot_eager`` backend: Dynamo's tracing (guards, dynamic shapes, graph breaks)
and AOTAutograd's joint forward/backward graph, which is where a model goes wrong under ``torch.compile``,
without the minute of C++ code generation that inductor's CPU backend takes on two cores.
``benchmarks/gpu_check.sh`` compares inductor's compiled step with eager on the device it runs on (the CPU
in its self-test).
"""

from __future__ import annotations

import functools
import json

import pytest
import torch

from batch_factory import loader_batch, tiny_config
from bertprep.bert_model.pretrain import model_setup
from bertprep.bert_model.pretrain.architectures import PretrainingModel, build_model
from bertprep.bert_model.pretrain.trainer import TrainConfig, train
from model_factory import tiny_train_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("architecture,packing", [("bert", False), ("modernbert", True)])
@pytest.mark.slow  # ~26 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_the_compiled_step_traces_whole_and_gives_eager_losses_and_gradients(architecture, packing):
    torch.manual_seed(0)
    eager = PretrainingModel(build_model(tiny_config(architecture)))
    torch.manual_seed(0)
    twin = PretrainingModel(build_model(tiny_config(architecture)))
    compiled = model_setup.compile_model(twin, "default", fullgraph=True, backend="aot_eager")  # fullgraph: no break
    batch = loader_batch(packing)
    torch.manual_seed(1)  # dropout on: the same draws in the same order
    a = eager(**batch).training_loss(1.0)
    torch.manual_seed(1)
    b = compiled(**batch).training_loss(1.0)
    a.backward()
    b.backward()
    assert abs(a.item() - b.item()) <= 1e-5, (a.item(), b.item())
    for (name, p), q in zip(eager.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-5, msg=name)


def _train_config(root, out, **overrides) -> TrainConfig:
    return tiny_train_config(root / "train", out, **{"max_steps": 4, "warmup_steps": 1, "log_every": 1, **overrides})


def _losses(run_dir) -> list[float]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [x["loss"] for x in lines if x["split"] == "train"]


@pytest.mark.slow  # ~22 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_a_compiled_run_follows_eager_and_resumes_exactly(tiny_shards, tmp_path, monkeypatch):
    compiled_with, traced = [], []
    real_compile = torch.compile
    aot_eager = torch._dynamo.lookup_backend("aot_eager")

    def aot_eager_counted(graph, example_inputs):
        traced.append(graph)
        return aot_eager(graph, example_inputs)

    def compile_aot_eager(model, **kwargs):
        compiled_with.append(kwargs)
        return real_compile(model, backend=aot_eager_counted, **kwargs)

    monkeypatch.setattr(model_setup.torch, "compile", compile_aot_eager)
    torch._dynamo.reset()  # (no graph of an earlier test in this process)
    eager = train(_train_config(tiny_shards, tmp_path / "eager", compile=False))
    assert not compiled_with
    full = train(_train_config(tiny_shards, tmp_path / "full", compile=True))
    assert compiled_with and all(kw.get("dynamic") for kw in compiled_with)
    for a, b in zip(_losses(tmp_path / "eager"), _losses(tmp_path / "full"), strict=True):
        assert abs(a - b) <= 1e-5
    train(_train_config(tiny_shards, tmp_path / "parts", compile=True, stop_after_steps=2))
    second = train(_train_config(tiny_shards, tmp_path / "parts", compile=True, resume=str(tmp_path / "parts")))
    assert second.step == 4 and full.step == 4 and eager.step == 4
    a, b = full.model.state_dict(), second.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    assert _losses(tmp_path / "parts") == _losses(tmp_path / "full")
    # One trace for the three compiled runs: before, Dynamo traced the model twice (a restart to make the modules'
    # float attributes constants: ~40% of the compile time)
    assert len(traced) == 1, f"{len(traced)} traces"


def test_compile_is_on_for_cuda_and_off_on_the_cpu_unless_asked():
    config = functools.partial(TrainConfig, shards="s", output_dir="o")
    assert model_setup.compile_enabled(config(), torch.device("cuda")) is True
    assert model_setup.compile_enabled(config(), torch.device("cpu")) is False
    assert model_setup.compile_enabled(config(compile=True), torch.device("cpu")) is True
    assert model_setup.compile_enabled(config(compile=False), torch.device("cuda")) is False


@pytest.mark.slow  # ~9 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_inductor_itself_gives_eager_losses_with_dropout_0():
    """inductor's own code (C++ on the CPU), not only ``aot_eager``'s tracing: three AdamW steps of a 1-layer
    BERT, compiled and eager, within 1e-5 of each other. Dropout 0: with dropout inductor draws from its own
    random stream, so a compiled run is not step-for-step equal to eager (``--compile``'s help says so)."""
    config = tiny_config("bert", num_hidden_layers=1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(PretrainingModel(build_model(config)))
    eager, twin = models
    compiled = model_setup.compile_model(twin, "default")
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (eager, twin)]
    batch = loader_batch(False)
    for _ in range(3):
        losses = []
        for model, optimizer in zip((eager, compiled), optimizers, strict=True):
            loss = model(**batch).training_loss(1.0)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= 1e-5, losses


@pytest.mark.parametrize(
    "mode,dynamic",
    [("default", True), ("max-autotune-no-cudagraphs", True), ("reduce-overhead", None), ("max-autotune", None)],
)
def test_compile_mode_reaches_torch_compile_and_cuda_graph_modes_start_static(monkeypatch, mode, dynamic):
    calls = []
    monkeypatch.setattr(model_setup.torch, "compile", lambda model, **kwargs: calls.append(kwargs) or model)
    model_setup.compile_model(torch.nn.Linear(2, 2), mode)
    assert calls == [{"mode": mode, "dynamic": dynamic}]
