"""``--kernels``: which implementation LayerNorm runs. Liger Kernel is Triton code (CUDA only), so on this CPU
the selection and the refusal are tested, not the Liger path itself (``benchmarks/gpu_check.sh`` runs it on
a GPU); ``torch`` is the reference every device runs."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from batch_factory import loader_batch, tiny_config
from bertprep.bert_model.models import kernels
from bertprep.bert_model.models.kernels import configure_kernels, resolve_kernels
from bertprep.bert_model.pretrain.architectures import PretrainingModel, build_model
from bertprep.cli.main import cli

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)


def test_auto_is_torch_on_the_cpu_and_liger_on_cuda_where_installed(monkeypatch):
    monkeypatch.setattr(kernels, "liger_installed", lambda: True)
    assert resolve_kernels("auto", CPU) == "torch" and resolve_kernels("auto", CUDA) == "liger"
    monkeypatch.setattr(kernels, "liger_installed", lambda: False)
    assert resolve_kernels("auto", CUDA) == "torch" and resolve_kernels("torch", CUDA) == "torch"


def test_liger_is_refused_on_a_cpu_and_without_its_package_in_one_line(monkeypatch):
    monkeypatch.setattr(kernels, "liger_installed", lambda: True)
    with pytest.raises(ValueError, match="needs a CUDA device") as err:
        resolve_kernels("liger", CPU)
    assert "\n" not in str(err.value) and "--kernels torch" in str(err.value)
    monkeypatch.setattr(kernels, "liger_installed", lambda: False)
    with pytest.raises(ValueError, match="pip install liger-kernel"):
        resolve_kernels("liger", CUDA)


@pytest.mark.parametrize("architecture", ["bert", "modernbert"])
def test_the_torch_kernels_leave_the_model_as_written(architecture):
    torch.manual_seed(0)
    model = PretrainingModel(build_model(tiny_config(architecture))).eval()
    batch = loader_batch(True)
    before = model(**batch).mlm_loss
    assert configure_kernels(model, "auto", CPU) == "torch"
    assert not any("forward" in m.__dict__ for m in model.modules())  # every module's own forward
    torch.testing.assert_close(model(**batch).mlm_loss, before, atol=0, rtol=0)


def test_train_with_liger_on_a_cpu_ends_in_one_line(tiny_shards, tmp_path):
    args = ["train", "--shards", str(tiny_shards / "train"), "-o", str(tmp_path / "run"), "--preset", "tiny"]
    result = CliRunner().invoke(cli, [*args, "--device", "cpu", "--kernels", "liger", "--no-progress"])
    assert (result.exit_code != 0 and result.exception is None) or isinstance(result.exception, SystemExit)
    assert "--kernels liger needs a CUDA device" in result.output
    assert "Traceback" not in result.output
