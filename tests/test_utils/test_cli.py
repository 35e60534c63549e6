"""razorlib.utils.cli: the argparse types of the tools' numeric flags, the check of
--cfg-options keys against the config, the refusal of an earlier run's results, and the
line a refused run logs."""
import argparse
import inspect
import logging
import math
import subprocess
import sys
from pathlib import Path

import pytest
from mmengine.config import Config
from mmengine.runner import Runner

from doctest_helpers import assert_examples_pass
from razorlib.engine.config import load_config
from razorlib.utils.cli import (RUNNER_KEYS, at_least, check_earlier_results, closest,
                                in_range, merge_cfg_options, refuse)

REPO = Path(__file__).parents[2]
AUTOSLIM = REPO / 'configs' / 'pruning' / 'autoslim'


def parser_with(**types) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog='tool', exit_on_error=False)
    for name, kind in types.items():
        parser.add_argument(f'--{name}', type=kind)
    return parser


def test_the_examples_run():
    assert_examples_pass('razorlib.utils.cli')


def test_the_module_runs_alone_without_importing_razorlib_or_torch(tmp_path):
    """The tools run it from its file (runpy) before they parse their arguments, so that
    --help imports nothing heavy."""
    probe = ('import runpy, sys\n'
             f'names = runpy.run_path({str(REPO / "razorlib" / "utils" / "cli.py")!r})\n'
             "assert names['at_least'](2)('3') == 3\n"
             "print(sorted(m for m in ('torch', 'razorlib', 'mmengine') if m in sys.modules))\n")
    result = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == '[]'


@pytest.mark.parametrize('text, expected', [('1', 1), ('7', 7), (' 2 ', 2)])
def test_at_least_takes_integers_from_its_low_end(text, expected):
    assert at_least(1)(text) == expected


@pytest.mark.parametrize('low, text', [(1, '0'), (1, '-3'), (0, '-1'), (1, '1.5'), (1, 'x'),
                                       (1, ''), (1, 'nan')])
def test_at_least_names_what_it_expected_and_what_it_got(low, text):
    with pytest.raises(argparse.ArgumentError) as info:
        parser_with(steps=at_least(low)).parse_args(['--steps', text])
    assert str(info.value) == \
        f'argument --steps: expected an integer of at least {low}, got {text!r}'


@pytest.mark.parametrize('ends, taken, refused', [
    ('[]', ['0', '0.5', '1'], ['-0.01', '1.01']),
    ('(]', ['1e-9', '1'], ['0', '-1', '1.5']),
    ('[)', ['0', '0.999'], ['1', '-1e-9']),
    ('()', ['0.5'], ['0', '1']),
])
def test_in_range_takes_the_ends_its_notation_names(ends, taken, refused):
    parse = in_range(0, 1, ends)
    assert [parse(text) for text in taken] == [float(text) for text in taken]
    for text in refused + ['nan', 'inf', 'half']:
        with pytest.raises(argparse.ArgumentTypeError,
                           match=rf'^expected a number in \{ends[0]}0, 1\{ends[1]}, '
                           rf"got '{text}'$"):
            parse(text)


def test_in_range_without_an_upper_end_and_a_bad_notation():
    positive = in_range(0, math.inf, '()')
    assert positive('1e30') == 1e30
    with pytest.raises(argparse.ArgumentTypeError, match=r"in \(0, inf\), got '0'"):
        positive('0')
    with pytest.raises(ValueError, match="ends: one of"):
        in_range(0, 1, '[[')


def test_closest():
    assert closest('batch_sizee', ['batch_size', 'num_workers']) == ['batch_size']
    assert closest('zzz', ['batch_size']) == []


TREE = dict(
    model=dict(type='ImageClassifier', backbone=dict(type='ResNet', depth=18, strides=(1, 2)),
               head=dict(type='LinearClsHead', num_classes=10)),
    train_dataloader=dict(batch_size=32, num_workers=2, dataset=dict(type='DigitsDataset')),
    train_cfg=dict(by_epoch=True, max_epochs=30),
    param_scheduler=[dict(type='LinearLR', end=5), dict(type='CosineAnnealingLR', T_max=30)],
    default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=1)),
    randomness=dict(seed=0),
    load_from=None,
    sizes=[1, 2])


@pytest.mark.parametrize('key, value', [
    ('model.backbone.depth', 50),  # an existing key
    ('param_scheduler.1.T_max', 5),  # a list item by its index, as mmengine takes it
    ('model.backbone.frozen_stages', 1),  # a new argument of a registered class
    ('model.head.in_channels', 64),  # not one letter off a key beside it
    ('model.backbone.strides', [2, 2]),  # a whole tuple
    ('train_dataloader.pin_memory', True),  # a DataLoader argument
    ('train_cfg.val_interval', 5),  # a loop argument
    ('randomness.deterministic', True),  # Runner.set_randomness's
    ('experiment_name', 'run'),  # a Runner argument the config leaves out
    ('env_cfg', dict(cudnn_benchmark=True)),
    ('sizes', [3]),
    ('log_processor.window_size', 5),  # the LogProcessor the Runner builds without one
    # an argument of what the Runner hands a section the config leaves out
    ('auto_scale_lr.base_batch_size', 256),
    ('val_dataloader.batch_size', 8),
    ('val_cfg.fp16', True),
])
def test_keys_that_set_something_are_merged(key, value):
    cfg = Config(TREE)
    merge_cfg_options(cfg, {key: value})
    node = cfg
    for part in key.split('.'):
        node = node[int(part)] if isinstance(node, list) else node[part]
    assert node == value


@pytest.mark.parametrize('key, message', [
    ('train_dataloader.batch_sizee',
     'the config has no such key (closest: train_dataloader.batch_size, '
     'train_dataloader.batch_sampler, '),
    ('train_cfg.max_epoch', 'the config has no such key (closest: train_cfg.max_epochs'),
    # a letter away from a key its dict sets: a class taking **kwargs would ignore it
    ('default_hooks.checkpoint.intervall',
     'the config has no such key (closest: default_hooks.checkpoint.interval'),
    ('model.backbone.dept', 'the config has no such key (closest: model.backbone.depth'),
    ('model.head.num_clases', 'the config has no such key (closest: model.head.num_classes'),
    ('model.backbone.detph', 'the config has no such key (closest: model.backbone.depth'),
    ('modle.backbone', 'the config has no such key (closest: model.backbone)'),
    ('modle', 'the config has no such key (closest: model)'),
    ('randomness.sed.x', 'randomness has no key sed (closest: randomness.seed)'),
    ('ptq.calib_steps', 'the config has no key ptq; it has default_hooks, '),
    ('param_scheduler.2.T_max', 'param_scheduler has 2 items, indexed 0 to 1'),
    ('param_scheduler.T_max', 'param_scheduler is a list: name an item by its index, e.g. '
     'param_scheduler.0'),
    ('param_scheduler.0', 'mmengine sets the keys of the dicts in a list, not its items; '
     'give the whole list: param_scheduler=[...]'),
    ('sizes.0', 'mmengine sets the keys of the dicts in a list, not its items; give the '
     'whole list: sizes=[...]'),
    ('model.backbone.strides.0', 'model.backbone.strides = (1, 2), not a dict of keys; give '
     'its whole value: model.backbone.strides=...'),
    ('load_from.path', 'load_from = None, not a dict of keys'),
    # the config's loop is epoch-based: an iteration-based loop's argument would fail later
    ('train_cfg.max_iters', 'the config has no such key (closest: train_cfg.max_epochs'),
    ('log_processor.window_sizee', "the config has no log_processor, and the LogProcessor "
     "the Runner builds without one takes no argument 'window_sizee' (closest: "
     'log_processor.window_size)'),
    ('visualizer.typo', "the config has no visualizer, and the Visualizer the Runner builds "
     "without one takes no argument 'typo'"),
    # a section the config leaves out: the Runner reads enable, so enabel scaled nothing
    ('auto_scale_lr.enabel', "the config has no auto_scale_lr, and the Runner reads no "
     "'enabel' in one (closest: auto_scale_lr.enable)"),
    ('env_cfg.cudnn_benchmrk', "the config has no env_cfg, and the Runner reads no "
     "'cudnn_benchmrk' in one (closest: env_cfg.cudnn_benchmark)"),
    ('val_dataloader.batch_sise', "the config has no val_dataloader, and the Runner reads no "
     "'batch_sise' in one (closest: val_dataloader.batch_size)"),
    ('test_cfg.fp61', "the config has no test_cfg, and the Runner reads no 'fp61' in one"),
])
def test_keys_that_set_nothing_are_refused_naming_the_closest(key, message):
    cfg = Config(TREE)
    with pytest.raises(ValueError) as info:
        merge_cfg_options(cfg, {'model.backbone.depth': 50, key: 1})
    assert str(info.value).startswith(f'--cfg-options {key}: {message}')
    assert cfg.model.backbone.depth == 18  # nothing merged


def test_a_tools_own_sections_may_be_added_and_the_error_is_the_tools():
    class ToolError(Exception):
        pass

    cfg = Config(TREE)
    merge_cfg_options(cfg, {'ptq.calib_steps': 2, 'ptq.observer': 'kl'}, tool_keys=('ptq', ))
    assert cfg.ptq == dict(calib_steps=2, observer='kl')
    with pytest.raises(ToolError, match='--cfg-options calib.steps'):
        merge_cfg_options(cfg, {'calib.steps': 2}, tool_keys=('ptq', ), error=ToolError)
    assert merge_cfg_options(cfg, None) is cfg


def test_the_runner_keys_cover_what_the_runner_takes():
    taken = set(inspect.signature(Runner.__init__).parameters) - {'self', 'cfg'}
    assert taken <= set(RUNNER_KEYS)


# the --cfg-options tools/pipeline.py gives tools/train.py and tools/ptq.py
PIPELINE_OPTIONS = [
    ('autoslim_plaincnn_digits_supernet.py',
     ['train_cfg.max_epochs', 'param_scheduler.1.T_max', 'param_scheduler.1.end']),
    ('autoslim_plaincnn_digits_subnet_finetune.py',
     ['model.channel_cfg', 'load_from', 'randomness.seed', 'train_cfg.max_epochs',
      'param_scheduler.0.T_max', 'param_scheduler.0.end', 'train_cfg.val_interval',
      'default_hooks.checkpoint.interval']),
]


@pytest.mark.parametrize('config, keys', PIPELINE_OPTIONS)
def test_the_options_the_pipeline_passes_are_taken(config, keys):
    merge_cfg_options(load_config(AUTOSLIM / config), {key: 1 for key in keys})


def test_an_earlier_result_is_refused_without_overwrite(tmp_path):
    check_earlier_results(tmp_path, ['a.json'], overwrite=False)
    for name in ('a.json', 'b.onnx', 'c.json'):
        (tmp_path / name).write_text('{}')
    check_earlier_results(tmp_path, ['a.json', 'b.onnx'], overwrite=True)
    with pytest.raises(ValueError) as info:
        check_earlier_results(tmp_path, ['a.json', 'b.onnx'], overwrite=False)
    assert str(info.value) == f'{tmp_path}: holds the a.json and b.onnx of an earlier run; ' \
        'pass --overwrite to replace them, or choose another --work-dir'
    with pytest.raises(KeyError, match='holds the a.json, b.onnx and c.json of an earlier'):
        check_earlier_results(tmp_path, ['a.json', 'b.onnx', 'c.json', 'd'], False, KeyError)


def test_refuse_logs_one_error_after_the_config_it_names_and_returns_2(monkeypatch):
    logged = []
    monkeypatch.setattr('mmengine.logging.print_log',
                        lambda msg, logger=None, level=None: logged.append((msg, level)))
    assert refuse(ValueError('model: bad'), 'configs/a.py') == 2
    assert refuse('ckpt.pth: not a complete checkpoint') == 2
    assert logged == [('configs/a.py: model: bad', logging.ERROR),
                      ('ckpt.pth: not a complete checkpoint', logging.ERROR)]
