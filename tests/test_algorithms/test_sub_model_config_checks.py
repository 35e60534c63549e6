"""sub_model checks the channel config against the architecture before it slices or loads
anything: a config of another architecture, or one edited by hand, is refused naming the
file, the module or parameter and what the config keeps against what the model expects,
instead of failing at the first forward with a shape error deep in torch.  Configs that
deployed before still deploy."""
import copy
import re
import warnings

import pytest
import torch
import torch.nn as nn
import yaml
from mmengine.registry import init_default_scope
from test_sub_model import HALF, KEEP_0, KEEP_1, Net, architecture
from zoo import ZOO

from razorlib.algorithms import sub_model
from razorlib.pruning import L1NormPruner
from razorlib.registry import MODELS

X = torch.randn(1, 3, 16, 16)
FC_IN = 'modules.head.fc (input channels)'
CONV_1_OUT = 'modules.backbone.stages.1.conv (output channels)'
BOUND_TO_CONV_1 = (f'as {CONV_1_OUT}, whose channels the forward binds to these, keeps 8 of 16 '
                   "channels [1, 2, 4, 8, 9, 11, 13, 15] (group 'backbone.stages.1.conv')")


@pytest.fixture(autouse=True)
def scope():
    init_default_scope('razorlib')


def edited(change) -> dict:
    cfg = copy.deepcopy(HALF)
    change(cfg['modules'])
    return cfg


def written(tmp_path, cfg: dict) -> str:
    path = tmp_path / 'subnet.yaml'
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def half_of(name: str, **options):
    """A test-zoo model in eval mode, L1-pruned to half (masked), its pruner and its
    channel config."""
    entry = ZOO[name]
    torch.manual_seed(0)
    model = entry.build().eval()
    pruner = L1NormPruner(ratio=0.5, **options)
    pruner.prepare_from_supernet(model, entry.example_inputs())
    pruner.set_subnet(pruner.subnet_at(0.5))
    return model, pruner, pruner.export_subnet()


def refused(channel_cfg, message: str, model=None) -> None:
    """sub_model of ``channel_cfg`` raises ValueError with exactly ``message``."""
    with pytest.raises(ValueError) as caught:
        sub_model(architecture() if model is None else model, channel_cfg)
    assert str(caught.value) == message


def test_a_consumer_left_out_while_its_producer_is_cut_is_named_with_the_file(tmp_path):
    path = written(tmp_path, edited(lambda modules: modules.pop('head.fc')))
    refused(path, f'channel_cfg {path}: {FC_IN}: the channel config keeps all 16 channels (no '
                  f'entry), expected 8 of 16 channels [1, 2, 4, 8, 9, 11, 13, 15], '
                  f'{BOUND_TO_CONV_1}')


def test_a_norm_left_out_while_its_conv_is_cut_is_named():
    refused(edited(lambda modules: modules.pop('backbone.stages.0.bn')),
            'channel_cfg: modules.backbone.stages.0.bn (channels): the channel config keeps '
            'all 8 channels (no entry), expected 4 of 8 channels [4, 5, 6, 7], as '
            'modules.backbone.stages.0.conv (output channels), whose channels the forward binds '
            "to these, keeps 4 of 8 channels [4, 5, 6, 7] (group 'backbone.stages.0.conv')")


def test_a_consumer_keeping_another_count_is_named():
    refused(edited(lambda modules: modules['head.fc'].update(in_channels=3, in_index=[0, 1, 2])),
            f'channel_cfg: {FC_IN}: the channel config keeps 3 of 16 channels [0, 1, 2], '
            f'expected 8 of 16 channels [1, 2, 4, 8, 9, 11, 13, 15], {BOUND_TO_CONV_1}')


def test_a_consumer_keeping_other_channels_of_the_same_count_is_named():
    """It would not even fail: it would read the wrong channels."""
    refused(edited(lambda modules: modules['head.fc'].update(in_index=list(range(8)))),
            f'channel_cfg: {FC_IN}: the channel config keeps 8 of 16 channels [0, 1, 2, 3, 4, '
            f'5, 6, 7], expected 8 of 16 channels [1, 2, 4, 8, 9, 11, 13, 15], '
            f'{BOUND_TO_CONV_1}')


def test_a_module_the_model_lacks_is_named_with_the_file(tmp_path):
    path = written(tmp_path, edited(
        lambda modules: modules.update({'head.fcx': modules.pop('head.fc')})))
    refused(path, f"channel_cfg {path}: channel config names module 'head.fcx', which the "
                  'model does not have')


def test_a_parameter_the_model_lacks_is_named():
    cfg = dict(HALF, params={'backbone.gamma': [dict(dim=0, channels=1, raw_channels=8,
                                                     index=[0])]})
    refused(cfg, "channel_cfg: channel config names parameter 'backbone.gamma', which the "
                 'model does not have')


def test_a_width_larger_than_the_layers_is_named():
    def wider(modules):
        for name in ('backbone.stages.0.conv', 'backbone.stages.0.bn'):
            modules[name]['raw_out_channels'] = 32
        modules['backbone.stages.1.conv']['raw_in_channels'] = 32
    refused(edited(wider), 'channel_cfg: backbone.stages.0.conv: the channel config expects 32 '
                           'output channels, the module has 8')


def test_an_axis_the_layer_lacks_is_named():
    refused(edited(lambda modules: modules['backbone.stages.0.bn'].update(
        in_channels=4, raw_in_channels=8, in_index=KEEP_0)),
        "channel_cfg: backbone.stages.0.bn: a BatchNorm2d has no ['in'] channel axis to slice "
        "(it has ['out'])")


def test_a_pretrained_model_given_built_is_left_untouched_by_a_config_that_does_not_fit(
        tmp_path):
    """Its checkpoint would have been loaded into it before slicing found the error."""
    torch.save({'state_dict': {k: v + 1 for k, v in MODELS.build(architecture()).state_dict()
                               .items()}}, tmp_path / 'dense.pth')
    model = MODELS.build(dict(architecture(), init_cfg=dict(
        type='Pretrained', checkpoint=str(tmp_path / 'dense.pth'))))
    before = copy.deepcopy(model.state_dict())
    for cfg in (edited(lambda modules: modules.pop('head.fc')),
                edited(lambda modules: modules.update({'head.fcx': modules.pop('head.fc')}))):
        with pytest.raises(ValueError, match='^channel_cfg: '):
            sub_model(model, cfg)
        assert not model.is_init
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_configs_that_cut_only_some_groups_or_what_a_pruner_would_not_still_deploy():
    """Channels a config does not cut need no entry (stage 0 is whole here); nothing
    forbids cutting the classifier's outputs, which a pruner never does."""
    cfg = {'version': 1, 'modules': {
        'backbone.stages.1.conv': {'out_channels': 8, 'raw_out_channels': 16,
                                   'out_index': KEEP_1},
        'backbone.stages.1.bn': {'out_channels': 8, 'raw_out_channels': 16,
                                 'out_index': KEEP_1},
        'head.fc': {'in_channels': 8, 'raw_in_channels': 16, 'in_index': KEEP_1,
                    'out_channels': 4, 'raw_out_channels': 10, 'out_index': [0, 1, 2, 3]}}}
    slim = sub_model(architecture(), cfg)
    assert slim(X).shape == (1, 4)
    assert slim.backbone.stages[0].conv.out_channels == 8


def test_a_residual_branch_cut_apart_from_the_other_is_named():
    _, _, cfg = half_of('resnet_basic')
    cfg = cfg.to_dict()
    stem = cfg['modules']['conv1']['out_index']
    other = [i for i in range(16) if i not in stem]
    for name in ('layer1.0.conv2', 'layer1.0.bn2'):  # the branch alike, the sum apart
        cfg['modules'][name]['out_index'] = other
    with pytest.raises(ValueError) as caught:
        sub_model(ZOO['resnet_basic'].build(), cfg, input_shape=(3, 32, 32))
    assert str(caught.value) == (
        'channel_cfg: modules.layer1.0.conv2 (output channels): the channel config keeps 8 of '
        f'16 channels {other}, expected 8 of 16 channels {stem}, as modules.conv1 (output '
        'channels), whose channels the forward binds to these, keeps 8 of 16 channels '
        f"{stem} (group 'conv1')")


@pytest.mark.parametrize('heads', ['whole', 'width'])
def test_attention_pruned_whole_heads_or_in_width_deploys_as_the_pruner_does(heads):
    model, pruner, cfg = half_of('vit', heads=heads)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        slim = sub_model(copy.deepcopy(model), cfg, input_shape=(3, 32, 32))  # masked
    assert not [w for w in caught if str(w.message).startswith('sub_model')]  # it was traced
    expected = pruner.deploy_subnet(copy.deepcopy(model), cfg)
    x = ZOO['vit'].example_inputs()
    assert torch.equal(slim(x), expected(x))


def test_a_masked_model_is_checked_and_keeps_its_masks_when_refused():
    model = MODELS.build(architecture())
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X)
    pruner.set_subnet(pruner.subnet_at(0.5))
    masked = model(X)
    cfg = pruner.export_subnet().to_dict()
    del cfg['modules']['head.fc']
    with pytest.raises(ValueError, match=re.escape(f'channel_cfg: {FC_IN}: the channel config '
                                                   'keeps all 16 channels (no entry)')):
        sub_model(model, cfg)
    assert torch.equal(model(X), masked)
    assert 'out_mask' in model.backbone.stages[1].conv._buffers


def test_a_position_embedding_left_out_is_named():
    _, _, cfg = half_of('vit')
    kept = cfg.params.pop('pos_embed')[2]
    with pytest.raises(ValueError, match=re.escape(
            'channel_cfg: params.pos_embed (dim 2): the channel config keeps all 32 channels '
            f'(no entry), expected 16 of 32 channels [{", ".join(map(str, kept.index[:8]))}, '
            '...], as ')):
        sub_model(ZOO['vit'].build(), cfg, input_shape=(3, 32, 32))


class FixedSize(nn.Module):
    """Takes 3x16x16 images only (a flatten into a Linear)."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8 * 16 * 16, 2)

    def forward(self, x):
        return self.fc(self.conv(x).flatten(1))


CONV_ONLY = {'version': 1, 'modules': {'conv': {'out_channels': 4, 'raw_out_channels': 8,
                                                'out_index': [0, 1, 2, 3]}}}


def test_the_trace_runs_on_input_shape():
    with pytest.raises(ValueError, match=re.escape(
            'channel_cfg: modules.fc (input channels): the channel config keeps all 2048 '
            'channels (no entry), expected 1024 of 2048 channels [0, 1, 2, 3, 4, 5, 6, 7, ...], '
            'as modules.conv (output channels)')):
        sub_model(FixedSize(), CONV_ONLY, input_shape=(3, 16, 16))


def test_a_model_that_cannot_be_traced_is_warned_about_and_its_widths_still_checked():
    with pytest.warns(UserWarning, match=re.escape(
            'sub_model: the channel config is checked against the layer widths only: the '
            'FixedSize cannot be traced on a random (1, 3, 224, 224) batch (RuntimeError: '
            'mat1 and mat2 shapes cannot be multiplied')):
        slim = sub_model(FixedSize(), CONV_ONLY)  # it does not fit: nothing else finds it
    assert slim.conv.out_channels == 4
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        refused(dict(CONV_ONLY, modules={'conv2': CONV_ONLY['modules']['conv']}),
                "channel_cfg: channel config names module 'conv2', which the model does not "
                'have', FixedSize())


def test_a_model_without_a_forward_still_deploys_a_config_with_a_warning():
    cfg = {'version': 1, 'modules': {
        'body.conv': {'out_channels': 4, 'raw_out_channels': 8, 'out_index': KEEP_0},
        'body.bn': {'out_channels': 4, 'raw_out_channels': 8, 'out_index': KEEP_0},
        'fc': {'in_channels': 4, 'raw_in_channels': 8, 'in_index': KEEP_0}}}
    with pytest.warns(UserWarning, match='the Net cannot be traced .*NotImplementedError'):
        slim = sub_model(Net(), cfg)
    assert slim.fc.in_features == 4
