"""A custom runtime's options key the latency table's cache as JSON: torch dtypes, devices
and memory formats by their names, anything JSON cannot hold refused when the timer is
built, naming the runtime class and the option.  A deterministic stand-in runtime: nothing
is timed."""
import re

import pytest
import torch
from latency_fakes import X, ParamsRuntime, net

from razorlib.pruning import ImportancePruner
from razorlib.pruning.latency import SubnetLatency


class OptionsRuntime(ParamsRuntime):
    """:class:`ParamsRuntime` with the options (and device) it is given."""

    def __init__(self, options, device='cpu', **kwargs):
        super().__init__(**kwargs)
        self._options, self.device = options, device

    def options(self):
        return self._options


def timer(options, cache_dir=False, device='cpu'):
    pruner = ImportancePruner()
    pruner.prepare_from_supernet(net(), X)
    return SubnetLatency(pruner, X, OptionsRuntime(options, device, cache_dir=cache_dir))


def test_torch_dtypes_devices_and_memory_formats_key_by_their_names():
    key, meta = timer({'dtype': torch.float16, 'on': torch.device('cpu'),
                       'layout': torch.channels_last, 'shape': (1, 8),
                       'nested': {'dtypes': [torch.bfloat16]}}).table_key()
    assert {k: meta[k] for k in ('dtype', 'on', 'layout', 'shape', 'nested')} == {
        'dtype': 'torch.float16', 'on': 'cpu', 'layout': 'torch.channels_last',
        'shape': [1, 8], 'nested': {'dtypes': ['torch.bfloat16']}}
    assert key == timer({'dtype': torch.float16, 'on': torch.device('cpu'),
                         'layout': torch.channels_last, 'shape': (1, 8),
                         'nested': {'dtypes': [torch.bfloat16]}}).table_key()[0]  # every run
    assert timer({'dtype': torch.bfloat16}).table_key()[0] != \
        timer({'dtype': torch.float16}).table_key()[0]


def test_a_torch_device_attribute_keys_as_its_name():
    assert timer({}, device=torch.device('cpu')).table_key() == timer({}).table_key()


def test_a_dtype_option_caches_the_table_and_reads_it_back(tmp_path):
    first = timer({'dtype': torch.float16}, tmp_path)
    first.table
    again = timer({'dtype': torch.float16}, tmp_path)
    assert again.table.layers == first.table.layers and again.runtime.calls == 0
    assert len(list(tmp_path.iterdir())) == 1


def test_json_options_key_as_before():
    """Options JSON holds (the built-in runtimes') give the fields they always gave, so
    the tables cached before are still found."""
    fields = OptionsRuntime({'graph': True, 'dtype': 'float16'}).key_fields()
    assert fields == dict(runtime='params',
                          runtime_class=f'{__name__}.OptionsRuntime', device='cpu',
                          threads=1, quantile=0.5, versions={'torch': torch.__version__},
                          graph=True, dtype='float16')


class Opaque:
    pass


@pytest.mark.parametrize('options, where, kind', [
    ({'fuse': {'conv', 'bn'}}, "OptionsRuntime.options()['fuse']", 'set'),
    ({'engine': Opaque()}, "OptionsRuntime.options()['engine']", 'Opaque'),
    ({'cfg': {'fuse': [1, frozenset()]}}, "OptionsRuntime.options()['cfg']['fuse'][1]",
     'frozenset'),
    ({'by_dim': {0: 'a'}}, "OptionsRuntime.options()['by_dim']", 'dict'),
])
def test_an_option_json_cannot_hold_is_refused_naming_the_runtime_and_option(options, where,
                                                                             kind):
    pruner = ImportancePruner()
    pruner.prepare_from_supernet(net(), X)
    runtime = OptionsRuntime(options, cache_dir=False)
    with pytest.raises(TypeError) as caught:
        SubnetLatency(pruner, X, runtime)  # when built, before anything is timed
    assert str(caught.value).startswith(f"{where} is a {kind} (")
    assert "which the latency table's cache key cannot hold" in str(caught.value)
    assert runtime.calls == 0


def test_a_device_attribute_json_cannot_hold_is_refused_by_name():
    with pytest.raises(TypeError, match=r'^OptionsRuntime\.device is a Opaque \('):
        timer({}, device=Opaque())


@pytest.mark.parametrize('name, what', [
    ('device', "the option name 'device' is a field Runtime.key_fields() sets itself"),
    (3, 'the option name 3 is no string'),
])
def test_an_option_name_that_cannot_key_the_table_is_refused(name, what):
    """An option named like a field would overwrite it (the device), a name that is no
    string cannot be a JSON key."""
    with pytest.raises(TypeError, match=rf'^OptionsRuntime\.options\(\): {re.escape(what)}, '
                       r"so it cannot key the latency table's cache; name it otherwise \(the "
                       r'fields are runtime, runtime_class, device, threads, quantile, '
                       r'versions\)$'):
        timer({name: 'cuda'})
