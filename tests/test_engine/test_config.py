"""load_config names the file and line of a syntax error; check_config names the key at
fault; prepare_cpu_distributed fixes mmengine's CPU traps and distributed_run closes the
process group it ran in."""
import contextlib
import gc
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from mmengine.config import Config

from doctest_helpers import assert_examples_pass
from razorlib.engine.config import (TEST_KEYS, ConfigError, build_model, check_config,
                                    load_config)
from razorlib.engine.distributed import (distributed_run, gloo_threads,
                                         prepare_cpu_distributed)

SUPERNET = Path(__file__).parents[2] / 'configs' / 'pruning' / 'autoslim' / \
    'autoslim_plaincnn_digits_supernet.py'


@pytest.fixture
def cfg() -> Config:
    return load_config(SUPERNET)


def test_the_supernet_config_passes(cfg):
    check_config(cfg)
    check_config(cfg, TEST_KEYS)


@pytest.mark.parametrize('options, key', [
    ({'model.architecture.backbone.type': 'PlainCNNN'}, 'model.architecture.backbone.type'),
    ({'model.pruner.type': 'RatioPrunr'}, 'model.pruner.type'),
    ({'model.num_random_sample': 3}, 'model.num_random_sample'),
    ({'model.architecture.head.num_class': 3}, 'model.architecture.head.num_class'),
    ({'train_dataloader.dataset.type': 'Digits'}, 'train_dataloader.dataset.type'),
    ({'train_dataloader.dataset.upscal': 8}, 'train_dataloader.dataset.upscal'),
    ({'train_dataloader.sampler.type': 'Sampler'}, 'train_dataloader.sampler.type'),
    ({'val_evaluator.topk_': 1}, 'val_evaluator.topk_'),
    ({'optim_wrapper.optimizer.type': 'SDG'}, 'optim_wrapper.optimizer.type'),
    ({'optim_wrapper.optimizer.learning_rate': 0.1}, 'optim_wrapper.optimizer.learning_rate'),
    ({'param_scheduler.1.type': 'Cosine'}, 'param_scheduler[1].type'),
    ({'custom_hooks.1.type': 'DumpHook'}, 'custom_hooks[1].type'),
    ({'custom_hooks.0.intervall': 3}, 'custom_hooks[0].intervall'),
    ({'default_hooks.checkpoint.type': 'Checkpoint'}, 'default_hooks.checkpoint.type'),
    ({'model_wrapper_cfg.type': 'AutoSlimDP'}, 'model_wrapper_cfg.type'),
])
def test_mistakes_are_reported_with_their_key(cfg, options, key):
    cfg.merge_from_dict(options)
    with pytest.raises(ConfigError) as info:
        check_config(cfg)
    assert str(info.value).startswith(f'{key}: ')


def test_a_pruner_argument_is_checked_through_the_base_classes(cfg):
    # ImportancePruner passes its **kwargs on to StructurePruner
    cfg.model.pruner = dict(type='ImportancePruner', importance='l1', flop=0.5)
    with pytest.raises(ConfigError, match=r"^model.pruner.flop: ImportancePruner takes no "
                       r"argument 'flop' \(closest: flops\); it takes \["):
        check_config(cfg)
    cfg.model.pruner = dict(type='ImportancePruner', importance='l1', flops=0.5,
                            except_start_keys=['head'])
    check_config(cfg)


@pytest.mark.parametrize('options, message', [
    ({'model.pruner.flops': 1.5}, 'model: flops is a fraction of the dense model'),
    ({'model.step_freq': -1}, 'model: ItePruneAlgorithm: step_freq must be an integer >= 1'),
    ({'model.pruner.importance': 'l11'}, "model: .*'l11'"),
])
def test_a_value_the_constructors_refuse_is_a_config_error(options, message):
    cfg = load_config(SUPERNET.parents[1] / 'ite_prune' / 'ite_prune_plaincnn_digits.py',
                      options)
    with pytest.raises(ConfigError, match=f'^{message}'):
        build_model(cfg)


def test_build_model_builds_what_the_runner_builds(cfg):
    assert type(build_model(cfg)).__name__ == 'AutoSlim'


def test_a_wrapper_type_without_its_scope_is_reported(cfg):
    cfg.model_wrapper_cfg.type = 'AutoSlimDDP'  # the Runner would not find it
    with pytest.raises(ConfigError, match="^model_wrapper_cfg.type: .*'razorlib.AutoSlimDDP'"):
        check_config(cfg)


def test_a_missing_section_is_named(cfg):
    cfg.pop('optim_wrapper')
    with pytest.raises(ConfigError, match='^optim_wrapper: missing'):
        check_config(cfg)


def test_types_resolve_in_the_configs_default_scope(cfg):
    cfg.default_scope = 'mmengine'  # unqualified razorlib names are unknown there
    with pytest.raises(ConfigError, match="^model.type: 'AutoSlim' is not registered"):
        check_config(cfg)
    cfg.model.type = 'razorlib.AutoSlim'
    with pytest.raises(ConfigError, match='^model.architecture.type'):
        check_config(cfg)


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match='nope.py does not exist'):
        load_config(tmp_path / 'nope.py')


def test_a_syntax_error_is_named_with_its_file_and_line(tmp_path):
    (tmp_path / 'base.py').write_text(''.join(f'v{i} = {i}\n' for i in range(19))
                                      + 'x = (\nwork_dir = None\n')
    (tmp_path / 'child.py').write_text("_base_ = ['./base.py']\nwork_dir = 'w'\n")
    (tmp_path / 'own.py').write_text("_base_ = ['./child.py']\nmodel = dict(type='AutoSlim'\n")
    with pytest.raises(ConfigError, match=r"^line 2: '\(' was never closed: model = dict"):
        load_config(tmp_path / 'own.py')
    # mmengine's own parse of a base file says 'File "<unknown>", line 20'
    with pytest.raises(ConfigError, match=f"^{tmp_path / 'base.py'}, line 20: "):
        load_config(tmp_path / 'child.py')


@pytest.mark.parametrize('text, message', [
    ("x = undefined + 1\n", "the config failed while it ran: NameError: name 'undefined'"),
    ("_base_ = ['./nope.py']\n", '_base_: .*nope.py does not exist'),
])
def test_a_config_that_fails_while_it_runs_is_one_error(tmp_path, text, message):
    (tmp_path / 'cfg.py').write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path / 'cfg.py')


def test_the_examples_run():
    assert_examples_pass('razorlib.engine.config')


def test_cpu_distributed_gets_device_ids_none(tmp_path):
    dist.init_process_group('gloo', init_method=f'file://{tmp_path}/store', rank=0,
                            world_size=1)
    try:
        cfg = Config(dict(model_wrapper_cfg=dict(type='AutoSlimDDP')))
        assert prepare_cpu_distributed(cfg)
        assert cfg.model_wrapper_cfg == dict(type='AutoSlimDDP', device_ids=None)
        plain = Config(dict())
        prepare_cpu_distributed(plain)
        assert plain.model_wrapper_cfg == dict(type='MMDistributedDataParallel',
                                               broadcast_buffers=False,
                                               find_unused_parameters=False,
                                               device_ids=None)
    finally:
        dist.destroy_process_group()


def started_gloo_threads(seconds: float = 5.0) -> list:
    """:func:`gloo_threads` once one is there: right after ``init_process_group`` gloo's
    threads may not be up yet (the list was empty in 1 run of 4 on a busy machine)."""
    deadline = time.monotonic() + seconds
    while not gloo_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return gloo_threads()


@pytest.mark.parametrize('fails', [False, True], ids=['finished', 'raised'])
def test_a_distributed_run_closes_its_process_group(tmp_path, fails):
    dist.init_process_group('gloo', init_method=f'file://{tmp_path}/store', rank=0,
                            world_size=1)
    try:
        with pytest.raises(RuntimeError) if fails else contextlib.nullcontext():
            with distributed_run(Config(dict())) as prepared:
                assert prepared and dist.is_initialized()
                assert started_gloo_threads()
                if fails:
                    raise RuntimeError('training failed')
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def train_in_a_cycle() -> None:
    """A DDP model kept in a reference cycle, as mmengine's Runner keeps its model."""
    holder = dict(model=DistributedDataParallel(nn.Linear(3, 2)))
    holder['self'] = holder
    holder['model'](torch.ones(4, 3)).sum().backward()


def test_a_distributed_run_stops_the_gloo_threads_of_a_model_it_let_go(tmp_path):
    dist.init_process_group('gloo', init_method=f'file://{tmp_path}/store', rank=0,
                            world_size=1)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        with distributed_run(Config(dict())):
            train_in_a_cycle()
    assert gloo_threads() == []


def test_a_distributed_run_warns_of_a_group_held_past_its_end(tmp_path):
    dist.init_process_group('gloo', init_method=f'file://{tmp_path}/store', rank=0,
                            world_size=1)
    with pytest.warns(UserWarning, match=r'gloo threads still running .*pt_gloo_runloop.* '
                      r'still holds the group'):
        with distributed_run(Config(dict())):
            model = DistributedDataParallel(nn.Linear(3, 2))
    del model
    gc.collect()
    assert gloo_threads() == []
