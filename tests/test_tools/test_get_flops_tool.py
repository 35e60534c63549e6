"""tools/get_flops.py counts supernets, subnets and plain models."""
import random

import pytest
import torch
import yaml
from mmengine.config import Config
from mmengine.registry import init_default_scope
from torch import nn

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


def plain_config(path, in_channels: int = 3) -> str:
    """A config of a small dense classifier taking ``in_channels`` image channels."""
    path.write_text(
        "default_scope = 'razorlib'\n"
        f"model = dict(type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(8, 16), "
        f"in_channels={in_channels}), head=dict(type='LinearClsHead', num_classes=10))\n")
    return str(path)


def test_an_input_the_model_cannot_take_is_one_line_naming_shape_and_the_module(
        tmp_path, monkeypatch):
    tool = load_tool('get_flops')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([plain_config(tmp_path / 'gray.py', in_channels=1)]) == 2
    assert log.messages == [
        '--shape (not given; pass the input the model takes): backbone.stages.0.conv (Conv2d) '
        'fails on input 1x3x224x224: Given groups=1, weight of size [8, 1, 3, 3], expected '
        'input[1, 3, 224, 224] to have 1 channels, but got 3 channels instead']
    log.messages.clear()
    assert tool.main([plain_config(tmp_path / 'rgb.py'), '--shape', '1', '16', '16']) == 2
    assert len(log.messages) == 1
    assert log.messages[0].startswith(
        '--shape: backbone.stages.0.conv (Conv2d) fails on input 1x1x16x16: Given groups=1')


def test_a_masked_supernet_refuses_an_input_of_other_channels_in_one_line(monkeypatch):
    """A masked layer refuses a batch its channel mask would broadcast (the 1-channel
    input of a 3-channel supernet): one line naming --shape and the layer."""
    tool = load_tool('get_flops')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(TINY), '--shape', '1', '16', '16']) == 2
    # the mask's error names the layer too: it is named once
    assert log.messages == ['--shape: architecture.backbone.stages.0.conv (Conv2d) fails on '
                            'input 1x1x16x16: its input has shape (1, 1, 16, 16), but it '
                            'takes 3 channels at dim -3']


def test_a_mask_added_without_a_name_is_named_once():
    """The mask's error names its layer by type alone (masks added without a name), which
    the module's name in the model does not end with: the tool takes the error's detail
    from its type, not by matching its text against the module."""
    from razorlib.layers import kind_of
    from razorlib.pruning.masks import add_masks

    model = nn.Sequential(nn.Conv2d(3, 4, 3))
    add_masks(model[0], kind_of(model[0]), out_dim=-3)
    tool = load_tool('get_flops')
    with pytest.raises(tool.InputError) as caught:
        tool.complexity(model, torch.randn(1, 1, 8, 8))
    assert str(caught.value) == ('0 (Conv2d) fails on input 1x1x8x8: its input has shape '
                                 '(1, 1, 8, 8), but it takes 3 channels at dim -3')


def test_a_subnet_that_leaves_a_layer_unsliced_is_one_line_naming_it(tmp_path, monkeypatch):
    """A channel config that slices a dense model's first conv but not the next conv's
    input (a partial config) is named with the conv that gets the wrong channel count."""
    kept = dict(out_channels=5, raw_out_channels=8, out_index=list(range(5)))
    (tmp_path / 'partial.yaml').write_text(yaml.safe_dump(dict(version=1, params={}, modules={
        'backbone.stages.0.conv': kept, 'backbone.stages.0.bn': kept})))
    tool = load_tool('get_flops')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([plain_config(tmp_path / 'rgb.py'), '--shape', '16', '--subnet',
                      str(tmp_path / 'partial.yaml')]) == 2
    assert log.messages == [
        f"--subnet {tmp_path / 'partial.yaml'}: backbone.stages.1.conv (Conv2d) fails on input "
        '1x3x16x16: Given groups=1, weight of size [16, 8, 3, 3], expected input[1, 5, 16, 16] '
        'to have 8 channels, but got 5 channels instead']


def test_a_module_that_refuses_its_input_in_a_pre_hook_is_the_one_named():
    """A refusal before the module's own forward (a channel mask's pre-hook) names that
    module, not its parent; the hooks are removed afterwards."""
    tool = load_tool('get_flops')
    net = nn.Sequential(nn.Conv2d(3, 4, 1), nn.Sequential(nn.Conv2d(4, 4, 1)))

    def refuse(module, args):
        raise RuntimeError('masked conv: 4 channels in, the mask has 3\nsecond line')

    net[1][0].register_forward_pre_hook(refuse)
    with pytest.raises(tool.InputError) as caught:
        tool.complexity(net, torch.randn(1, 3, 2, 2))
    assert str(caught.value) == ('1.0 (Conv2d) fails on input 1x3x2x2: masked conv: 4 channels '
                                 'in, the mask has 3')
    assert [len(m._forward_hooks) for m in net.modules()] == [0, 0, 0, 0]
