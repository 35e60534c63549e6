"""ResourceEstimatorHook, DumpSubnetHook and EpochSeedHook in a Runner."""
import json
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.runner import Runner

from razorlib.engine.hooks import DumpSubnetHook, EpochSeedHook, ResourceEstimatorHook
from razorlib.pruning import ChannelConfig

TINY = Path(__file__).parents[1] / 'data' / 'configs' / 'autoslim_tiny_digits.py'


def tiny_runner(work_dir: Path, name: str, custom_hooks: list) -> Runner:
    cfg = Config.fromfile(TINY)
    cfg.merge_from_dict(dict(work_dir=str(work_dir), experiment_name=name,
                             custom_hooks=custom_hooks, default_hooks=dict(checkpoint=None)))
    return Runner.from_cfg(cfg)


@pytest.fixture(scope='module')
def trained(tmp_path_factory) -> Runner:
    work_dir = tmp_path_factory.mktemp('hooks')
    runner = tiny_runner(work_dir, 'hooks', [
        dict(type='ResourceEstimatorHook', interval=5),
        dict(type='DumpSubnetHook', save_best='accuracy/top1')])
    runner.train()
    return runner


def test_resource_estimator_logs_flops_and_params_of_the_current_subnet(trained):
    complexity = trained.model.flops_params()
    hub = trained.message_hub
    assert hub.get_scalar('val/flops_M').current() == pytest.approx(complexity.flops / 1e6)
    assert hub.get_scalar('val/params_M').current() == pytest.approx(complexity.params / 1e6)
    assert hub.get_scalar('train/flops_M').current() == pytest.approx(complexity.flops / 1e6)
    scalars = Path(trained.log_dir) / 'vis_data' / 'scalars.json'
    val_lines = [json.loads(line) for line in scalars.read_text().splitlines()
                 if 'accuracy/top1' in line]
    assert val_lines and val_lines[-1]['flops_M'] == pytest.approx(complexity.flops / 1e6)


def test_resource_estimator_counts_models_without_flops_params():
    hook = ResourceEstimatorHook(input_shape=(3, 4, 4))
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1))
    assert hook.estimate(net) == {'flops_M': 16 * 8 * 27 / 1e6, 'params_M': 8 * 28 / 1e6}


def test_resource_estimator_refuses_an_input_shape_the_model_does_not_count_on(tmp_path):
    # input_shape=(3, 32, 32) was ignored for AutoSlim: flops_M was that of its own
    # model.input_shape (3, 16, 16), logged as if counted at 32x32
    runner = tiny_runner(tmp_path, f'shape_{tmp_path.name}', [
        dict(type='ResourceEstimatorHook', interval=1, input_shape=(3, 32, 32))])
    message = (r'^ResourceEstimatorHook: input_shape=\(3, 32, 32\), but AutoSlim counts its '
               r'FLOPs and params itself \(flops_params\) on its model.input_shape=\(3, 16, '
               r"16\); leave the hook's input_shape out, or set model.input_shape to count at "
               r'another size$')
    with pytest.raises(ValueError, match=message):
        runner.train()
    assert runner.iter == 0  # refused before the first step
    with pytest.raises(ValueError, match=message):
        ResourceEstimatorHook(input_shape=(3, 32, 32)).estimate(runner.model)
    same = ResourceEstimatorHook(input_shape=(3, 16, 16)).estimate(runner.model)
    assert same == ResourceEstimatorHook().estimate(runner.model)
    assert same['flops_M'] == pytest.approx(runner.model.flops_params().flops / 1e6)


def test_resource_estimator_leaves_the_global_rng_as_it_was():
    # a draw from the global RNG at every logged iteration changed what was trained
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1))
    state = torch.get_rng_state()
    ResourceEstimatorHook(interval=1, input_shape=(3, 4, 4)).estimate(net)
    assert torch.equal(torch.get_rng_state(), state)


def test_dump_subnet_writes_latest_best_and_final_configs(trained):
    work_dir = Path(trained.work_dir)
    expected = trained.model.export_subnet()
    for name in ('subnet_latest.yaml', 'subnet_best.yaml', 'subnet_final.yaml'):
        assert ChannelConfig.load(work_dir / name) == expected
    best = trained.message_hub.get_info(DumpSubnetHook.BEST_KEY)
    assert best == pytest.approx(trained.message_hub.get_scalar('val/accuracy/top1').current())


def test_dump_subnet_keeps_the_best_by_its_rule(tmp_path):
    hook = DumpSubnetHook(save_best='err', rule='less')
    model = SimpleNamespace(export_subnet=lambda: ChannelConfig())
    infos = {}
    runner = SimpleNamespace(model=model, work_dir=str(tmp_path),
                             logger=SimpleNamespace(info=lambda msg: None),
                             message_hub=SimpleNamespace(get_info=infos.get,
                                                         update_info=infos.__setitem__))
    for err in (0.5, 0.7, 0.2):
        hook.after_val_epoch(runner, {'err': err})
    assert infos[DumpSubnetHook.BEST_KEY] == 0.2
    with pytest.raises(KeyError, match="save_best='err' is not a validation metric"):
        hook.after_val_epoch(runner, {'accuracy/top1': 1.0})


def test_epoch_seed_hook_makes_each_epoch_draw_the_same_numbers():
    def draws(epoch: int) -> tuple:
        runner = SimpleNamespace(seed=3, epoch=epoch, cfg=Config(dict(randomness=dict(seed=3))))
        EpochSeedHook().before_train_epoch(runner)
        return torch.rand(2).tolist(), np.random.rand(), random.random()

    first = draws(1)
    torch.rand(5)  # whatever ran in between
    assert draws(1) == first
    assert draws(2) != first
