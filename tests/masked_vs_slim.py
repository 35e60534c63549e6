"""``sample_and_deploy``: the check most pruning tests end with, importable from any test
directory (``tests/`` is on the path, see ``conftest.py``)."""
import copy

import torch

from razorlib.utils import get_model_complexity


def main_output(model, x):
    """``model(x)`` without gradients; for keyword inputs (a transformers model's
    ``{'input_ids': ...}``) its logits where it has a head, else its last hidden state."""
    with torch.no_grad():
        if not isinstance(x, dict):
            return model(x)
        output = model(**x)
    logits = getattr(output, 'logits', None)
    return logits if logits is not None else output.last_hidden_state


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def deploy_checked(pruner, model, x):
    """The masked ``model``'s main output under the pruner's current subnet, and the slim
    copy it deploys (in eval mode), asserted to compute (relative error <= 1e-4) and
    count what the masked model does."""
    masked = main_output(model, x)
    params = get_model_complexity(model, x).params
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet()).eval()
    assert relative_error(main_output(slim, x), masked) <= 1e-4
    assert params == sum(p.numel() for p in slim.parameters())
    return masked, slim


def sample_and_deploy(pruner, model, x):
    """Sample a subnet of a prepared ``pruner`` (seed 0) and deploy it on a copy of
    ``model`` (:func:`deploy_checked`); returns the slim model."""
    torch.manual_seed(0)
    pruner.set_subnet(pruner.sample_subnet())
    return deploy_checked(pruner, model, x)[1]
