"""Which kind a module gets: the most derived class wins, later registrations override,
and kinds given for one call win over the registry without changing it."""
import pytest
import torch.nn as nn

from razorlib.layers import ConvKind, KindTable, LayerKind, LinearKind, kind_of
from razorlib.registry import LAYER_KINDS


class MyConv(nn.Conv2d):
    pass


class MyConvKind(ConvKind):
    module_types = (MyConv, )


class FrozenConvKind(ConvKind):
    def trace(self, ctx, node, ins, name, module):
        return None


def test_built_in_kinds_cover_subclasses():
    assert isinstance(kind_of(MyConv(2, 2, 1)), ConvKind)
    assert isinstance(kind_of(nn.MultiheadAttention(4, 2).out_proj), LinearKind)
    assert kind_of(nn.ReLU()) is None


def test_the_most_derived_class_wins_whatever_the_order():
    table = KindTable([MyConvKind])
    assert type(table.kind_of(MyConv(2, 2, 1))) is MyConvKind
    assert type(table.kind_of(nn.Conv2d(2, 2, 1))) is ConvKind


def test_a_later_registration_overrides_and_is_undone():
    LAYER_KINDS.register_module(module=FrozenConvKind)
    try:
        assert type(kind_of(nn.Conv2d(2, 2, 1))) is FrozenConvKind
    finally:
        LAYER_KINDS._module_dict.pop('FrozenConvKind')
    assert type(kind_of(nn.Conv2d(2, 2, 1))) is ConvKind


def test_kinds_for_one_call_accept_instances_classes_names_and_dicts():
    conv = nn.Conv2d(2, 2, 1)
    for spec in (FrozenConvKind(), FrozenConvKind):
        assert type(KindTable([spec]).kind_of(conv)) is FrozenConvKind
    for spec, module, kind in (('BatchNormKind', nn.BatchNorm2d(2), 'BatchNormKind'),
                               (dict(type='LinearKind'), nn.Linear(2, 2), 'LinearKind')):
        assert type(KindTable([spec]).kind_of(module)).__name__ == kind
    assert type(kind_of(nn.Conv2d(2, 2, 1))) is ConvKind


def test_bad_kinds_are_refused_by_name():
    with pytest.raises(TypeError, match='layer_kinds takes'):
        KindTable([3])

    class NoTypes(LayerKind):
        pass

    with pytest.raises(ValueError, match='NoTypes covers no module type'):
        KindTable([NoTypes])


def test_a_kind_can_name_its_module_type_by_qualified_name():
    class ByName(ConvKind):
        module_types = (f'{MyConv.__module__}.{MyConv.__qualname__}', )

    table = KindTable([ByName])
    assert type(table.kind_of(MyConv(2, 2, 1))) is ByName
    assert type(table.kind_of(nn.Conv2d(2, 2, 1))) is ConvKind
