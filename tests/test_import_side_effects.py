"""Importing razorlib changes nothing in torch beyond the documented checkpoint allow-list
(razorlib/engine/checkpoint.py), and tracing leaves the global random state alone."""
import json
import subprocess
import sys

SNAPSHOT = '''
import json, torch
import mmengine.model, mmengine.runner, onnx, torch.distributed  # what razorlib imports
def snapshot():
    return dict(
        threads=torch.get_num_threads(), dtype=str(torch.get_default_dtype()),
        rng=torch.random.get_rng_state().sum().item(), grad=torch.is_grad_enabled(),
        deterministic=torch.are_deterministic_algorithms_enabled(),
        cudnn=torch.backends.cudnn.benchmark,
        globals=sorted(str(g) for g in torch.serialization.get_safe_globals()),
        function_modes=len(torch.overrides._get_current_function_mode_stack()),
        default_device=str(torch.get_default_device()))
before = snapshot()
import razorlib
from razorlib.registry import register_all_modules
register_all_modules(init_default_scope=False)
after = snapshot()
from razorlib.engine.checkpoint import CHECKPOINT_GLOBALS
print(json.dumps(dict(before=before, after=after,
                      allowed=sorted(str(g) for g in CHECKPOINT_GLOBALS))))
'''


def test_import_changes_only_the_checkpoint_allow_list():
    out = subprocess.run([sys.executable, '-c', SNAPSHOT], capture_output=True, text=True,
                         check=True).stdout
    result = json.loads(out.splitlines()[-1])
    before, after = result['before'], result['after']
    added = sorted(set(after.pop('globals')) - set(before.pop('globals')))
    assert added == sorted(set(result['allowed']))
    assert after == before


def test_tracing_with_default_inputs_leaves_the_global_rng_alone():
    import torch
    import torch.nn as nn

    from razorlib.tracing import trace
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 2, 1))
    state = torch.random.get_rng_state()
    trace(model)
    assert torch.equal(torch.random.get_rng_state(), state)
