"""ChannelConfig round trips and deploy_subnet onto fresh models; bad configs lose nothing."""
import copy

import pytest
import torch
import torch.nn as nn

from razorlib.pruning import ChannelConfig, ChannelSelection, L1NormPruner, slim_model
from zoo import ZOO, flatten_outputs, run_model


@pytest.fixture
def exported():
    entry = ZOO['resnext']
    torch.manual_seed(0)
    model = entry.build().eval()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, entry.example_inputs())
    pruner.set_subnet(pruner.sample_subnet())
    with torch.no_grad():
        masked = flatten_outputs(run_model(model, entry.example_inputs()))
    return entry, model, pruner.export_subnet(), masked


@pytest.mark.parametrize('suffix', ['.json', '.yaml'])
def test_round_trip_through_files_and_deploy_on_a_fresh_model(exported, tmp_path, suffix):
    entry, model, cfg, masked = exported
    path = tmp_path / f'subnet{suffix}'
    cfg.dump(path)
    loaded = ChannelConfig.load(path)
    assert loaded == cfg
    fresh = entry.build().eval()
    fresh.load_state_dict({k: v for k, v in model.state_dict().items() if 'mask' not in k})
    slim = L1NormPruner().deploy_subnet(fresh, str(path))
    with torch.no_grad():
        out = flatten_outputs(run_model(slim, entry.example_inputs()))
    for a, b in zip(masked, out):
        assert torch.allclose(a, b, atol=1e-5)
    assert list(tmp_path.iterdir()) == [path]  # no temporary files left behind


def test_exported_config_lists_indices_and_counts(exported):
    _, model, cfg, _ = exported
    data = cfg.to_dict()
    conv = data['modules']['layer1.0.conv1']
    assert conv['raw_out_channels'] == model.layer1[0].conv1.out_channels
    assert conv['out_channels'] == len(conv['out_index'])
    assert 'in_index' not in conv or len(conv['in_index']) == conv['in_channels']
    assert any(line.startswith('layer1.0.conv1: ') for line in cfg.summary())


def _conv_net():
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Conv2d(8, 4, 1))


@pytest.mark.parametrize('data,message', [
    ({'modules': {'9': {'out_channels': 8, 'raw_out_channels': 8}}},
     "names module '9', which the model does not have"),
    ({'modules': {'0': {'out_channels': 2, 'raw_out_channels': 6, 'out_index': [0, 1]}}},
     '0: the channel config expects 6 output channels, the module has 8'),
    ({'modules': {'1': {'in_channels': 8, 'raw_in_channels': 8}}},
     "1: a BatchNorm2d has no \\['in'\\] channel axis"),
    ({'modules': {'0': {'out_channels': 2, 'raw_out_channels': 8, 'out_index': [1, 1]}}},
     'modules.0.out_index: channel indices must be ascending, unique'),
    ({'modules': {'0': {'out_channels': 3, 'raw_out_channels': 8, 'out_index': [1, 2]}}},
     'modules.0: out_channels=3 but out_index lists 2 channels'),
    ({'modules': {'0': {'out_chans': 3}}}, "modules.0: unknown keys \\['out_chans'\\]"),
    ({'modules': {'0': {'raw_out_channels': 8}}}, "modules.0: missing key 'out_channels'"),
    ({'modules': {}, 'params': {'0.gamma': [{'dim': 0, 'channels': 8, 'raw_channels': 8}]}},
     "names parameter '0.gamma', which the model does not have"),
    ({'version': 7, 'modules': {}}, 'unsupported channel config version 7'),
    ([], "a mapping with a 'modules' key"),
    ({'modules': {'0': None}}, 'modules.0: a mapping, got NoneType None'),
    ({'modules': {}, 'modulse': {}}, r"unknown top-level keys \['modulse'\]"),
    ({'modules': {'0': {'out_channels': '4', 'raw_out_channels': 8,
                        'out_index': [0, 1, 2, 3]}}},
     "modules.0.out_channels: an integer, got '4'"),
    ({'modules': {'0': {'out_channels': 2, 'raw_out_channels': 8, 'out_index': [0.5, 1]}}},
     'modules.0.out_index: an integer, got 0.5'),  # was truncated to channel 0
    ({'modules': {}, 'params': {'0.weight': {'dim': 0}}},
     'params.0.weight: a list of dims, got dict'),
])
def test_bad_configs_name_the_key_and_leave_the_model_untouched(data, message):
    model = _conv_net()
    before = copy.deepcopy(model.state_dict())
    good = {'0': {'out_channels': 4, 'raw_out_channels': 8, 'out_index': [0, 1, 2, 3]},
            '2': {'in_channels': 4, 'raw_in_channels': 8, 'out_channels': 4,
                  'raw_out_channels': 4, 'in_index': [0, 1, 2, 3]}}
    if isinstance(data, dict) and 'modules' in data:
        data = {**data, 'modules': {**good, **data['modules']}}
    with pytest.raises(ValueError, match=message):
        slim_model(model, data)
    assert model[0].out_channels == 8
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def _classifier():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


def _edit_inconsistent(modules):  # the norm keeps other channels than its conv
    modules['1']['out_index'] = [i for i in range(16) if i not in modules['0']['out_index']]


def _edit_classifier(modules):  # prunes the logits: a frozen group
    modules['5'].update(out_channels=5, raw_out_channels=10, out_index=[0, 1, 2, 3, 4])


def _edit_missing(modules):  # leaves the norm out: it would keep 16 channels after 8
    del modules['1']


@pytest.mark.parametrize('edit,message', [
    (_edit_inconsistent, r'modules.1: the channel config keeps out \[.*\], the supernet '
     r'set to its spaces keeps out \['),
    (_edit_classifier, 'modules.5: the channel config keeps in 8/16, out 5/10, the supernet '
     'set to its spaces keeps in 8/16$'),
    (_edit_missing, 'modules.1: the channel config keeps no entry, the supernet set to its '
     'spaces keeps out 8/16'),
])
def test_deploy_checks_the_config_against_the_traced_groups_first(edit, message):
    # slim_model alone sliced these: wrong numbers, logits of the wrong shape, or a model
    # half sliced that failed inside torch
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(_classifier(), torch.randn(1, 3, 8, 8))
    pruner.set_subnet(pruner.sample_subnet())
    data = pruner.export_subnet().to_dict()
    edit(data['modules'])
    fresh = _classifier()
    before = copy.deepcopy(fresh.state_dict())
    with pytest.raises(ValueError, match=message):
        pruner.deploy_subnet(fresh, data)
    assert fresh[0].out_channels == 16
    assert all(torch.equal(v, fresh.state_dict()[k]) for k, v in before.items())
    assert pruner.deploy_subnet(fresh, pruner.export_subnet())(
        torch.randn(2, 3, 8, 8)).shape == (2, 10)


def test_a_loaded_masked_state_dict_is_the_subnet_the_pruner_exports(tmp_path):
    # the pruner exported the dense model after the load: its own record, not the masks
    x = torch.randn(2, 3, 8, 8)
    saved = L1NormPruner(ratio=0.5)
    model = _classifier()
    saved.prepare_from_supernet(model, x)
    saved.set_subnet(saved.sample_subnet())
    torch.save(model.state_dict(), tmp_path / 'masked.pth')
    pruner, other = L1NormPruner(ratio=0.5), _classifier()
    pruner.prepare_from_supernet(other, x)
    other.load_state_dict(torch.load(tmp_path / 'masked.pth'))
    assert pruner.export_subnet() == saved.export_subnet()
    assert all(torch.equal(a, b) for a, b in zip(pruner.current_subnet.values(),
                                                 saved.current_subnet.values()))
    with torch.no_grad():
        assert torch.allclose(pruner.deploy_subnet(_classifier(), pruner.export_subnet())(x),
                              model(x), atol=1e-5)
    other[1].out_mask.zero_()  # a norm that keeps nothing its conv keeps
    with pytest.raises(ValueError, match=r"the model's masks \(loaded from a state_dict\?\) are "
                       'no subnet of this pruner: the norm mask of 1 disagrees'):
        pruner.export_subnet()


def test_load_reports_the_file_at_fault(tmp_path):
    path = tmp_path / 'bad.yaml'
    path.write_text('modules: {conv: {out_channels: 2}}\n')
    with pytest.raises(ValueError, match=r"bad.yaml: modules.conv: missing key 'raw_out_channels'"):
        ChannelConfig.load(path)
    path.write_text('modules: [\n')
    with pytest.raises(ValueError, match='bad.yaml: not a valid channel config file'):
        ChannelConfig.load(path)


def test_selection_validation():
    with pytest.raises(ValueError, match='at least one channel'):
        ChannelSelection(4, ())
    with pytest.raises(ValueError, match=r'within \[0, 4\)'):
        ChannelSelection(4, (1, 4))
    assert ChannelSelection.full(3).is_full


def test_a_missing_file_says_which_step_writes_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r'channel config .*none.yaml does not exist; a '
                       r'pruning run \(tools/train.py\) or tools/prune.py writes slim.yaml'):
        ChannelConfig.load(tmp_path / 'none.yaml')


def _convs():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1))


def _split_config():
    """The first conv keeps channels 0-3, its norm and the next conv read 4-7: every
    width agrees, the channels do not."""
    low, high = ChannelSelection(8, range(4)), ChannelSelection(8, range(4, 8))
    return ChannelConfig(modules={'0': dict(out=low), '1': dict(out=high), '3': {'in': high}})


def test_a_new_pruner_refuses_a_config_whose_bound_channels_disagree(tmp_path):
    # a pruner not prepared sliced the fresh model as told: the slim model ran and
    # computed something else without a word
    path = tmp_path / 'subnet.json'
    _split_config().dump(path)
    model = _convs()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match=rf"^{path}: modules.1 \(channels\): the channel config "
                       r'keeps 4 of 8 channels \[4, 5, 6, 7\], expected 4 of 8 channels \[0, 1, '
                       r'2, 3\], as modules.0 \(output channels\)'):
        L1NormPruner().deploy_subnet(model, path, torch.randn(1, 3, 8, 8))
    assert model[0].out_channels == 8
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_new_pruner_checks_widths_only_where_the_model_cannot_be_traced():
    class Flat(nn.Module):  # takes (N, 3, 8, 8) images only: not the default 224x224
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 8, 3), nn.Linear(8 * 36, 4)

        def forward(self, x):
            return self.b(self.a(x).reshape(x.shape[0], 8 * 36))

    half = ChannelSelection(8, range(4))
    cfg = ChannelConfig(modules={'a': dict(out=half)})
    with pytest.warns(UserWarning, match=r'^L1NormPruner.deploy_subnet: the channel config is '
                      r'checked against the layer widths only: the Flat cannot be traced on a '
                      r'random 1x3x224x224 image \(.*\), so .* pass example_inputs= it runs '
                      r'on$'):
        slim = L1NormPruner().deploy_subnet(Flat(), cfg)
    assert slim.a.out_channels == 4
    with pytest.raises(ValueError, match=r"modules.b \(input channels\)"):
        L1NormPruner().deploy_subnet(Flat(), cfg, torch.randn(1, 3, 8, 8))
