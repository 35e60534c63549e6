"""A checkpoint written before a module had some of its state (its
``OPTIONAL_STATE_PREFIXES``) loads keeping the module's own values of that state, and
only of a prefix the checkpoint lacks entirely."""
import pytest
import torch
import torch.nn as nn
from mmengine.runner.checkpoint import load_state_dict

from razorlib.engine.checkpoint_check import check_fits
from razorlib.engine.optional_state import keep_own_optional_state


class Signature(nn.Module):
    """A child holding two buffers that came later, and a scratch buffer never saved."""

    def __init__(self):
        super().__init__()
        self.register_buffer('bits', torch.tensor([8, 8]))
        self.register_buffer('axis', torch.tensor(1))
        self.register_buffer('scratch', torch.zeros(2), persistent=False)


class Versioned(nn.Module):
    """A layer that gained a count, a child signature and extra state (a recorded choice)
    after its first checkpoints, which held only ``fc``."""

    OPTIONAL_STATE_PREFIXES = ('seen', 'signature.', '_extra_state')

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)
        self.signature = Signature()
        self.register_buffer('seen', torch.tensor(0))
        self.choice = 0

    def get_extra_state(self) -> torch.Tensor:
        return torch.tensor(self.choice)

    def set_extra_state(self, state: torch.Tensor) -> None:
        self.choice = int(state)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        keep_own_optional_state(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args)


def versioned(seen=0, bits=(8, 8), choice=0, weight=0.0):
    model = Versioned()
    model.seen.fill_(seen)
    model.signature.bits.copy_(torch.tensor(bits))
    model.choice = choice
    nn.init.constant_(model.fc.weight, weight)
    return model


def old_checkpoint(weight=1.0):
    """What the model saved before it had the optional state: ``fc`` only, nested."""
    return {f'layer.fc.{key}': value
            for key, value in versioned(weight=weight).fc.state_dict().items()}


def nested(model):
    return nn.ModuleDict({'layer': model})


@pytest.mark.parametrize('load', [
    lambda model, state: model.load_state_dict(state, strict=True),
    lambda model, state: load_state_dict(model, state, strict=True)],  # mmengine's, own walk
    ids=['torch', 'mmengine'])
def test_an_older_checkpoint_keeps_the_models_own_optional_state(load):
    model = versioned(seen=5, bits=(4, 6), choice=3)
    state = old_checkpoint(weight=1.0)
    load(nested(model), dict(state))  # strict: nothing reported missing
    assert model.fc.weight.tolist() == [[1.0, 1.0]]  # the checkpoint's
    assert int(model.seen) == 5 and model.signature.bits.tolist() == [4, 6]  # own, as set
    assert model.choice == 3
    assert set(state) == {'layer.fc.weight', 'layer.fc.bias'}  # the caller's dict unchanged


def test_optional_state_the_checkpoint_holds_is_loaded():
    saved = versioned(seen=9, bits=(2, 2), choice=1, weight=1.0)
    model = versioned(seen=5, bits=(4, 6), choice=3)
    nested(model).load_state_dict(nested(saved).state_dict(), strict=True)
    assert int(model.seen) == 9 and model.signature.bits.tolist() == [2, 2]
    assert model.choice == 1


def test_a_prefix_held_in_part_is_not_filled_in():
    # a checkpoint with some of the signature is of another model or damaged: the rest
    # is reported missing, not taken from this model
    state = nested(versioned()).state_dict()
    del state['layer.signature.axis']
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: '
                                           r'"layer.signature.axis"\. $'):
        nested(versioned()).load_state_dict(state, strict=True)


def test_only_saved_state_is_put_in():
    # the non-persistent buffer under an optional prefix would be an unexpected key
    state = dict(old_checkpoint())
    model = nested(versioned(seen=5))
    keep_own_optional_state(model.layer, state, 'layer.')
    assert sorted(state) == ['layer._extra_state', 'layer.fc.bias', 'layer.fc.weight',
                             'layer.seen', 'layer.signature.axis', 'layer.signature.bits']
    assert int(state['layer.seen']) == 5
    state['layer.seen'].fill_(7)  # a copy: the model's buffer is not the checkpoint's
    assert int(model.layer.seen) == 5


def test_the_key_check_and_the_loading_agree_on_an_older_checkpoint(tmp_path):
    model = nested(versioned())
    check_fits(model, old_checkpoint(), tmp_path / 'old.pth')
    model.load_state_dict(old_checkpoint(), strict=True)
