"""sub_model with a Pretrained init_cfg: the kept channels hold the dense checkpoint's
weights, and the runner's init_weights() loads nothing over them."""
from typing import Optional

import pytest
import torch
import torch.nn as nn
from mmengine.model import BaseModule
from mmengine.registry import init_default_scope

from razorlib.algorithms import sub_model
from razorlib.registry import MODELS

KEEP_0 = [4, 5, 6, 7]  # of stage 0's 8 channels
KEEP_1 = [1, 2, 4, 8, 9, 11, 13, 15]  # of stage 1's 16
HALF = {'version': 1, 'params': {}, 'modules': {
    'backbone.stages.0.conv': {'out_channels': 4, 'raw_out_channels': 8, 'out_index': KEEP_0},
    'backbone.stages.0.bn': {'out_channels': 4, 'raw_out_channels': 8, 'out_index': KEEP_0},
    'backbone.stages.1.conv': {'in_channels': 4, 'raw_in_channels': 8, 'in_index': KEEP_0,
                               'out_channels': 8, 'raw_out_channels': 16,
                               'out_index': KEEP_1},
    'backbone.stages.1.bn': {'out_channels': 8, 'raw_out_channels': 16, 'out_index': KEEP_1},
    'head.fc': {'in_channels': 8, 'raw_in_channels': 16, 'in_index': KEEP_1}}}


def architecture() -> dict:
    return dict(type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(8, 16)),
                head=dict(type='LinearClsHead', num_classes=10))


@pytest.fixture
def dense(tmp_path):
    """A dense model, its weights saved as mmengine saves a checkpoint."""
    init_default_scope('razorlib')
    torch.manual_seed(0)
    model = MODELS.build(architecture())
    for tensor in model.state_dict().values():  # running stats too, none at 0 or 1
        if tensor.is_floating_point():
            tensor.copy_(torch.rand_like(tensor) + 2)
    torch.save({'state_dict': model.state_dict()}, tmp_path / 'dense.pth')
    return model.state_dict(), str(tmp_path / 'dense.pth')


def sliced_by_hand(dense: dict) -> dict:
    """The dense weights at the kept channels (KEEP_0 out of stage 0, KEEP_0 in and
    KEEP_1 out of stage 1, KEEP_1 into the head)."""
    keep_0, keep_1 = torch.tensor(KEEP_0), torch.tensor(KEEP_1)
    expected = {'backbone.stages.0.conv.weight': dense['backbone.stages.0.conv.weight'][keep_0],
                'backbone.stages.1.conv.weight':
                    dense['backbone.stages.1.conv.weight'][keep_1][:, keep_0],
                'head.fc.weight': dense['head.fc.weight'][:, keep_1],
                'head.fc.bias': dense['head.fc.bias']}
    for stage, keep in (('0', keep_0), ('1', keep_1)):
        for field in ('weight', 'bias', 'running_mean', 'running_var'):
            key = f'backbone.stages.{stage}.bn.{field}'
            expected[key] = dense[key][keep]
    return expected


def assert_holds(model, expected: dict) -> None:
    state = model.state_dict()
    for key, value in expected.items():
        assert torch.equal(state[key], value), key


def test_the_kept_channels_hold_the_pretrained_weights_after_init_weights(dense):
    weights, checkpoint = dense
    torch.manual_seed(1)
    slim = MODELS.build(dict(type='sub_model', channel_cfg=HALF, architecture=dict(
        architecture(), init_cfg=dict(type='Pretrained', checkpoint=checkpoint))))
    expected = sliced_by_hand(weights)
    assert not slim.is_init  # building reads no checkpoint
    slim.init_weights()  # what the runner calls
    assert_holds(slim, expected)
    slim.init_weights()  # once
    assert_holds(slim, expected)


def test_building_reads_no_checkpoint(tmp_path):
    """Tools that build a model to load their own checkpoint (test.py, get_flops.py,
    deploy.py) need not have the dense one: it is read by init_weights()."""
    init_default_scope('razorlib')
    missing = str(tmp_path / 'not_on_this_machine.pth')
    slim = MODELS.build(dict(type='sub_model', channel_cfg=HALF, architecture=dict(
        architecture(), init_cfg=dict(type='Pretrained', checkpoint=missing))))
    assert slim.backbone.stages[1].conv.weight.shape == (8, 4, 3, 3)
    with pytest.raises(FileNotFoundError, match='not_on_this_machine.pth'):
        slim.init_weights()


class Body(BaseModule):
    def __init__(self, init_cfg: Optional[dict] = None):
        super().__init__(init_cfg)
        self.conv, self.bn = nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)


class Net(BaseModule):
    """A model whose submodule, not itself, has the init_cfg (as mm-project backbones)."""

    def __init__(self, body_init_cfg: Optional[dict] = None):
        super().__init__()
        self.body, self.fc = Body(body_init_cfg), nn.Linear(8, 2)


def test_a_submodules_pretrained_init_cfg_loads_before_slicing_too(tmp_path):
    dense = Net().state_dict()
    torch.save({'state_dict': dense}, tmp_path / 'dense.pth')
    torch.manual_seed(1)
    keep = torch.tensor(KEEP_0)
    cfg = {'version': 1, 'params': {}, 'modules': {
        name: {'out_channels': 4, 'raw_out_channels': 8, 'out_index': KEEP_0}
        for name in ('body.conv', 'body.bn')}}
    cfg['modules']['fc'] = {'in_channels': 4, 'raw_in_channels': 8, 'in_index': KEEP_0}
    slim = sub_model(Net(dict(type='Pretrained', checkpoint=str(tmp_path / 'dense.pth'),
                              prefix='body.')), cfg)
    slim.init_weights()
    assert_holds(slim, {key: dense[key][keep] for key in dense
                        if key.startswith('body.') and key != 'body.bn.num_batches_tracked'})
    assert not torch.equal(slim.fc.weight, dense['fc.weight'][:, keep])  # not pretrained


def test_without_a_pretrained_init_cfg_the_runner_initialises_the_subnet():
    init_default_scope('razorlib')
    slim = MODELS.build(dict(type='sub_model', channel_cfg=HALF, architecture=architecture()))
    assert not slim.is_init
    assert slim.backbone.stages[1].conv.weight.shape == (8, 4, 3, 3)


def test_a_channel_config_that_names_no_module_is_refused(tmp_path):
    """It would build the whole architecture, retrained as if it were the subnet."""
    init_default_scope('razorlib')
    empty = tmp_path / 'subnet.yaml'
    empty.write_text('version: 1\nmodules: {}\nparams: {}\n')
    with pytest.raises(ValueError, match='channel_cfg: the channel config names no module '
                       'or parameter, so the subnet would be the whole architecture'):
        sub_model(architecture(), str(empty))
