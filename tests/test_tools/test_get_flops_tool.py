"""tools/get_flops.py counts supernets, subnets and plain models."""
import random

import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from conftest import REPO, TINY, LogCapture, load_tool
from razorlib.registry import MODELS
from razorlib.utils import get_model_complexity
from razorlib.utils.complexity import human


def flops_table(log: LogCapture) -> dict:
    """``{row name: FLOPs string}`` from get_flops' table."""
    rows = [line.split() for line in log.messages[2:]]
    return {' '.join(row[:-2]): row[-2] for row in rows}


def test_get_flops_reports_max_min_and_a_subnet(tmp_path, monkeypatch):
    init_default_scope('razorlib')
    supernet = MODELS.build(Config.fromfile(TINY).model)
    supernet.set_subnet(supernet.sample_subnet(random.Random(0)))
    supernet.export_subnet().dump(tmp_path / 'subnet.yaml')
    expected = supernet.flops_params()
    tool = load_tool('get_flops')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(TINY), '--subnet', str(tmp_path / 'subnet.yaml')]) == 0
    assert log.messages[0] == 'AutoSlim on input 1x3x16x16'
    table = flops_table(log)
    assert list(table) == ['max subnet', 'min subnet', 'subnet']
    assert table['subnet'] == human(expected.flops)


def test_get_flops_counts_a_plain_model_at_the_given_shape(tmp_path, monkeypatch):
    (tmp_path / 'plain.py').write_text(
        "default_scope = 'razorlib'\n"
        "model = dict(type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(8, 16)),"
        " head=dict(type='LinearClsHead', num_classes=10))\n")
    tool = load_tool('get_flops')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(tmp_path / 'plain.py'), '--shape', '32']) == 0
    assert log.messages[0] == 'ImageClassifier on input 1x3x32x32'
    init_default_scope('razorlib')
    model = MODELS.build(Config.fromfile(tmp_path / 'plain.py').model)
    expected = get_model_complexity(model, torch.randn(1, 3, 32, 32))
    assert flops_table(log) == {'model': human(expected.flops)}
    assert tool.main([str(tmp_path / 'plain.py'), '--shape', '1', '2', '3', '4']) == 2
    assert log.messages[-1].startswith('--shape: expected C H W')


def _params_row(log: LogCapture) -> str:
    return [line.split() for line in log.messages[2:]][0][-1]


def test_an_algorithm_is_counted_by_its_architecture(monkeypatch):
    """A pruning algorithm counts the network it prunes (it has no max/min subnet to
    set); a QAT config its FP32 architecture, built without calibrating."""
    configs = REPO / 'configs'
    tool = load_tool('get_flops')
    for config, model in (
            (configs / 'pruning' / 'ite_prune' / 'ite_prune_plaincnn_digits.py', 'model'),
            (configs / 'quantization' / 'qat' / 'qat_plaincnn_digits_trt_int8.py',
             'model.architecture')):
        log = LogCapture(tool, monkeypatch)
        assert tool.main([str(config), '--shape', '16']) == 0
        init_default_scope('razorlib')
        cfg = Config.fromfile(str(config))
        built = MODELS.build(cfg.model if model == 'model' else cfg.model.architecture)
        architecture = getattr(built, 'architecture', built)
        expected = get_model_complexity(architecture, torch.randn(1, 3, 16, 16))
        assert flops_table(log) == {'model': human(expected.flops)}
        assert _params_row(log) == human(expected.params)


def test_a_nas_supernet_s_min_subnet_is_its_cheapest_not_its_first_choices(tmp_path, monkeypatch):
    """An op's first choice (fewest parameters at full width) is not the cheapest subnet
    when a width is nested in another op: the min row counts the subnet of fewest FLOPs."""
    architecture = dict(
        type='ImageClassifier', head=dict(type='LinearClsHead', num_classes=10),
        backbone=dict(type='SearchableShuffleNetV2', arch_setting=[(16, 2, 2)], stem_channels=8,
                      stem='cifar', last_channels=None, downsample='plain_3x3', candidates=dict(
                          plain_3x3=dict(type='ShuffleBlock', kernel_size=3),
                          dyn_7x7=dict(type='DynamicShuffleBlock', kernel_size=7,
                                       mid_ratios=(0.125, 1.0)))))
    (tmp_path / 'spos.py').write_text(
        "default_scope = 'razorlib'\n"
        f"model = dict(type='SPOS', architecture={architecture!r}, input_shape=(3, 8, 8))\n")
    tool = load_tool('get_flops')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(tmp_path / 'spos.py')]) == 0
    assert flops_table(log)['min subnet'] == human(25168)  # dyn_7x7 at width 0.125
