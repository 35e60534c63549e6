"""``sample_and_deploy``: the check most pruning tests end with, importable from any test
directory (``tests/`` is on the path, see ``conftest.py``)."""
import copy

import torch

from razorlib.utils import get_model_complexity


def sample_and_deploy(pruner, model, x):
    """Sample a subnet of a prepared ``pruner`` (seed 0), deploy it on a copy of
    ``model`` and assert that the slim model computes (relative error <= 1e-4) and counts
    exactly what the masked ``model`` does; returns the slim model."""
    torch.manual_seed(0)
    pruner.set_subnet(pruner.sample_subnet())
    with torch.no_grad():
        masked = model(x)
    params = get_model_complexity(model, x).params
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet()).eval()
    with torch.no_grad():
        out = slim(x)
    assert float((out - masked).norm() / masked.norm()) <= 1e-4
    assert params == sum(p.numel() for p in slim.parameters())
    return slim
