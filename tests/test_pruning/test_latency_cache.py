"""The latency table's on-disk cache: a corrupt or foreign file is warned about,
re-measured and overwritten; a cache that cannot be written is warned about and the
table kept in memory; the key tells dtypes and memory formats apart.  A deterministic
stand-in runtime: nothing is timed."""
import json

import pytest
import torch
from latency_fakes import ParamsRuntime, net

import razorlib
from razorlib.pruning import ImportancePruner
from razorlib.pruning.latency import (LatencyCacheWarning, LatencyTable, LatencyTableError,
                                      SubnetLatency)

X = torch.randn(1, 3, 16, 16)


def timer(cache_dir, model=None, x=X):
    pruner = ImportancePruner()
    pruner.prepare_from_supernet(net() if model is None else model, x)
    return SubnetLatency(pruner, x, ParamsRuntime(cache_dir=cache_dir))


@pytest.fixture
def cached(tmp_path):
    """The path of a good cached table, and the table."""
    table = timer(tmp_path).table
    (path, ) = tmp_path.iterdir()
    return path, table


def edit(text, change):
    data = json.loads(text)
    change(data)
    return json.dumps(data)


def first_layer(data):
    return next(iter(data['layers'].values()))


CORRUPTIONS = {
    'truncated': (lambda text: text[:len(text) // 2], 'invalid JSON'),
    'empty': (lambda text: '', 'invalid JSON'),
    'null': (lambda text: 'null', 'a JSON NoneType, not an object'),
    'a list': (lambda text: '[]', 'a JSON list, not an object'),
    'another version': (lambda text: edit(text, lambda d: d.update(version=1)),
                        'latency table version 1, expected 2'),
    'no layers field': (lambda text: edit(text, lambda d: d.pop('layers')),
                        "no 'layers' field"),
    'a field missing': (lambda text: edit(text, lambda d: first_layer(d).pop('ms')),
                        "layer '0': no ms"),
    'a grid of the wrong size': (
        lambda text: edit(text, lambda d: first_layer(d).update(ms=[[1.0] * 5] * 5)),
        "layer '0': ms is a 5x5 grid, expected 1x5"),
    'NaN milliseconds': (
        lambda text: edit(text, lambda d: first_layer(d)['ms'][0].__setitem__(0, float('nan'))),
        'not a finite non-negative number'),
    'a layer missing': (lambda text: edit(text, lambda d: d['layers'].pop('8')),
                        'no layer 8'),
    'an extra layer': (lambda text: edit(text, lambda d: d['layers'].update(
        bogus=first_layer(d))), 'unknown layer bogus'),
    'other grid widths': (lambda text: edit(text, lambda d: first_layer(d).update(
        outs=[1, 2, 3, 4, 5])), "layer '0' is timed at widths"),
    'other calls': (lambda text: edit(text, lambda d: first_layer(d).update(calls=3)),
                    "layer '0' runs 3 times, not 1"),
    'another key inside': (lambda text: edit(text, lambda d: d.update(key='other')),
                           "its key is 'other'"),
}


@pytest.mark.parametrize('corruption', list(CORRUPTIONS))
def test_an_unusable_cache_file_is_named_re_measured_and_overwritten(cached, corruption):
    path, good = cached
    change, reason = CORRUPTIONS[corruption]
    path.write_text(change(path.read_text()))
    again = timer(path.parent)
    with pytest.warns(LatencyCacheWarning) as record:
        table = again.table
    (warning, ) = [w for w in record if w.category is LatencyCacheWarning]
    message = str(warning.message)
    assert message.startswith(f'latency table cache {path}: ') and reason in message
    assert 're-measuring it and overwriting the file' in message
    assert again.runtime.calls > 0 and table == good  # measured again, the same figures
    assert LatencyTable.load(path) == good  # the file is good again
    assert timer(path.parent).table == good  # and read without a warning or a measurement


def test_a_good_cache_file_is_read_without_measuring(cached):
    path, good = cached
    again = timer(path.parent)
    assert again.table == good and again.runtime.calls == 0


@pytest.mark.parametrize('text, reason', [
    ('{"version": 2, "key": "k", "meta": {}, "layers": {"a": {"calls": 0, "ins": [1], '
     '"outs": [1], "ms": [[1.0]]}}}', "layer 'a': calls is 0, not a positive integer"),
    ('{"version": 2, "key": "k", "meta": {}, "layers": {"a": {"calls": 1, "ins": [2, 1], '
     '"outs": [1], "ms": [[1.0], [1.0]]}}}', "layer 'a': ins is [2, 1], not ascending"),
    ('{"version": 2, "key": 3, "meta": {}, "layers": {}}', "'key' is a int, not a str"),
])
def test_a_malformed_table_names_the_source_and_what_is_wrong(text, reason):
    with pytest.raises(LatencyTableError) as err:
        LatencyTable.from_json(text, 'x.json')
    assert str(err.value).startswith('x.json: ') and reason in err.value.reason


def _assert_cache_warning(record, path):
    (warning, ) = [w for w in record if w.category is LatencyCacheWarning]
    message = str(warning.message)
    assert f'cannot write {path}' in message
    assert '$RAZORLIB_CACHE_DIR' in message and 'cache_dir=False' in message
    assert 'kept in memory' in message


def test_a_cache_dir_that_is_a_file_warns_and_keeps_the_table_in_memory(tmp_path):
    blocker = tmp_path / 'afile'
    blocker.write_text('x')
    latency = timer(blocker / 'latency')
    with pytest.warns(LatencyCacheWarning) as record:
        table = latency.table
    _assert_cache_warning(record, latency.cache_path())
    calls = latency.runtime.calls
    assert table.layers and latency.table is table and latency.runtime.calls == calls


def test_an_unwritable_cache_dir_from_the_environment_still_prunes(tmp_path, monkeypatch):
    blocker = tmp_path / 'afile'
    blocker.write_text('x')
    monkeypatch.setenv('RAZORLIB_CACHE_DIR', str(blocker))
    runtime = ParamsRuntime()  # the default cache dir: $RAZORLIB_CACHE_DIR/latency
    with pytest.warns(LatencyCacheWarning, match=r'cannot write .*afile/latency/'):
        slim = razorlib.prune(net(), X, latency=0.5, runtime=runtime)
    assert slim[0].out_channels < 32


def test_a_write_refused_by_the_system_warns(tmp_path, monkeypatch):
    def refuse(self, path):
        raise PermissionError(1, 'Operation not permitted', str(path))
    monkeypatch.setattr(LatencyTable, 'save', refuse)
    latency = timer(tmp_path)
    with pytest.warns(LatencyCacheWarning) as record:
        assert latency.table.layers
    _assert_cache_warning(record, latency.cache_path())
    assert 'PermissionError: Operation not permitted' in str(record[0].message)


def _key(model, x):
    return timer(False, model, x).table_key()


def test_the_key_tells_dtypes_and_memory_formats_apart():
    base, meta = _key(net(), X)
    assert not {'input_dtypes', 'param_dtypes'} & set(meta)  # float32 contiguous: as before
    keys = {base,
            _key(net().double(), X.double())[0],
            _key(net().to(torch.bfloat16), X.to(torch.bfloat16))[0],
            _key(net().to(memory_format=torch.channels_last),
                 X.to(memory_format=torch.channels_last))[0],
            _key(net(), X.to(memory_format=torch.channels_last))[0]}
    assert len(keys) == 5
    meta64 = _key(net().double(), X.double())[1]
    assert meta64['input_dtypes'] == ['torch.float64']
    assert meta64['param_dtypes'] == ['torch.float64']
    meta_cl = _key(net().to(memory_format=torch.channels_last),
                   X.to(memory_format=torch.channels_last))[1]
    assert meta_cl['input_formats'] == ['channels_last']
    assert meta_cl['param_formats'] == ['channels_last', 'contiguous']


def test_a_float64_run_does_not_read_the_float32_table(tmp_path):
    timer(tmp_path).table
    double = timer(tmp_path, net().double(), X.double())
    double.table
    assert double.runtime.calls > 0 and len(list(tmp_path.iterdir())) == 2


def test_a_cache_file_that_cannot_be_read_is_re_measured(tmp_path):
    latency = timer(tmp_path)
    latency.cache_path().mkdir()  # a directory where the file should be
    with pytest.warns(LatencyCacheWarning) as record:
        assert latency.table.layers and latency.runtime.calls > 0
    messages = [str(w.message) for w in record if w.category is LatencyCacheWarning]
    assert 'cannot be read (IsADirectoryError' in messages[0]
    assert 'cannot write' in messages[1]  # and it cannot be overwritten either
