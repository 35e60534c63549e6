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
