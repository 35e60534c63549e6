"""Which subnet a one-shot supernet computes: an SPOS checkpoint records and restores the
subnet set when it was saved; DARTS refuses to set one (its forward is the mixture)."""
import pytest
import torch
from mmengine.runner.checkpoint import load_checkpoint, save_checkpoint

from razorlib.algorithms import DARTS, SPOS
from razorlib.engine.checkpoint_check import CheckpointError, check_fits, check_loads
from razorlib.nas import fix_subnet

BACKBONE = dict(type='SearchableShuffleNetV2', arch_setting=[(16, 3, 2)], stem_channels=8,
                stem='cifar', last_channels=None)
ARCH = dict(type='ImageClassifier', backbone=BACKBONE,
            head=dict(type='LinearClsHead', num_classes=10))
KEYS = [f'backbone.stages.0.{index}' for index in range(3)]
XCEPTION = dict.fromkeys(KEYS, 'shuffle_xception')


def spos(arch=ARCH) -> SPOS:
    torch.manual_seed(0)
    return SPOS(arch, input_shape=(3, 8, 8)).eval()


def test_an_spos_checkpoint_loads_with_the_subnet_set_when_it_was_saved(tmp_path):
    saved = spos()
    saved.set_subnet(XCEPTION)
    assert spos().current_subnet != XCEPTION  # what a loaded supernet computed before
    save_checkpoint({'state_dict': saved.state_dict()}, str(tmp_path / 'supernet.pth'))
    loaded = spos()
    load_checkpoint(loaded, str(tmp_path / 'supernet.pth'), strict=True)
    assert loaded.current_subnet == XCEPTION
    inputs = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(loaded(inputs), saved(inputs), rtol=0, atol=0)


def test_the_recorded_subnet_is_each_mutables_choice_index():
    model = spos()
    model.set_subnet(dict(XCEPTION, **{KEYS[1]: 'shuffle_5x5'}))
    choices = model.mutator.mutables[KEYS[0]].choices
    assert choices == ('shuffle_3x3', 'shuffle_5x5', 'shuffle_7x7', 'shuffle_xception')
    assert model.state_dict()['_extra_state'].tolist() == [3, 1, 3]


def test_a_checkpoint_without_a_recorded_subnet_loads_keeping_the_models_subnet(tmp_path):
    old = {key: value for key, value in spos().state_dict().items() if key != '_extra_state'}
    model = spos()
    model.set_subnet(XCEPTION)
    model.load_state_dict(old, strict=True)
    assert model.current_subnet == XCEPTION
    check_fits(spos(), old, 'old.pth')  # the tools take it


def test_a_recorded_subnet_of_another_space_is_refused_naming_it():
    state = spos().state_dict()
    state['_extra_state'] = torch.tensor([0, 1, 4])
    with pytest.raises(CheckpointError, match=r'^other.pth: SPOS: the checkpoint records the '
                                              r'subnet \[0, 1, 4\] \(choice indices\), which '
                                              r'does not fit this supernet: 3 mutables of '
                                              r'\[4, 4, 4\] choices$'):
        check_loads(spos(), state, 'other.pth')


def test_darts_set_subnet_is_refused_naming_fix_subnet():
    model = DARTS(dict(ARCH, backbone=dict(BACKBONE, mutable_cfg=dict(type='DiffMutableOP'))),
                  input_shape=(3, 8, 8)).eval()
    before = model.current_subnet
    with pytest.raises(ValueError, match=r'^DARTS.set_subnet: its forward is the softmax '
                                         r'mixture .* razorlib.nas.fix_subnet\(model.architecture'
                                         r', subnet\)'):
        model.set_subnet(XCEPTION)
    assert model.current_subnet == before
    inputs = torch.randn(2, 3, 8, 8)
    mixture = model(inputs)  # what the forward computes, whatever subnet is set
    assert not torch.allclose(fix_subnet(model.architecture, XCEPTION).eval()(inputs), mixture)


def test_counting_flops_leaves_the_global_rng_as_it_was():
    """ResourceEstimatorHook calls flops_params while training: a draw from the global RNG
    there changed what was trained."""
    supernet = spos()
    state = torch.get_rng_state()
    first = supernet.example_inputs()
    supernet.flops_params()
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(supernet.example_inputs(), first)
