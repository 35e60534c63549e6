"""Every razorlib component is reachable from mmengine's root registries as razorlib.X."""
from mmengine.registry import HOOKS, MODEL_WRAPPERS, MODELS

import razorlib
from razorlib.algorithms import AutoSlim, AutoSlimDDP, sub_model
from razorlib.engine import DumpSubnetHook, EpochSeedHook, ResourceEstimatorHook


def test_register_all_modules_makes_every_component_reachable_with_its_scope():
    razorlib.register_all_modules(init_default_scope=False)
    assert MODELS.get('razorlib.AutoSlim') is AutoSlim
    assert MODELS.get('razorlib.sub_model') is sub_model
    assert MODEL_WRAPPERS.get('razorlib.AutoSlimDDP') is AutoSlimDDP
    for hook in (DumpSubnetHook, EpochSeedHook, ResourceEstimatorHook):
        assert HOOKS.get(f'razorlib.{hook.__name__}') is hook
