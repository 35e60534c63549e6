"""Latency runtimes at their edges: config errors that name ``runtime=`` and the keys it
takes, dtypes onnxruntime cannot run refused before measuring, and keyword (mapping)
inputs, Hugging Face models' among them, on the torch and onnxruntime runtimes with the
key/value cache off.  Figures are only checked to be positive: nothing timed is asserted."""
import pytest
import torch
import torch.nn as nn
from latency_fakes import ParamsRuntime, net

import razorlib
from razorlib.pruning import ImportancePruner
from razorlib.pruning import runtimes as runtimes_module
from razorlib.pruning.latency import SubnetLatency
from razorlib.pruning.runtimes import OnnxRuntime, TorchRuntime, build_runtime, copy_to

X = torch.randn(1, 3, 16, 16)


class KeywordNet(nn.Module):
    """Takes its input by keyword, with an option that is not a tensor."""

    def __init__(self):
        super().__init__()
        self.body = net()

    def forward(self, image, scale=1.0):
        return self.body(image) * scale


# ----------------------------------------------------------------------------- config
def test_runtime_none_names_the_argument_and_the_choices():
    with pytest.raises(TypeError, match=r"runtime=None: .*\['cuda', 'onnxruntime', 'torch'\]"):
        build_runtime(None)
    with pytest.raises(TypeError, match='runtime=None'):
        razorlib.prune(net(), X, latency=0.5, runtime=None)


@pytest.mark.parametrize('kind', ['torch', 'onnxruntime'])
def test_an_unknown_config_key_names_runtime_and_the_keys_it_takes(kind):
    with pytest.raises(TypeError) as err:
        build_runtime(dict(type=kind, repeats=3))
    message = str(err.value)
    assert message.startswith(f"runtime=dict(type='{kind}', repeats=3): 'repeats' is not a "
                              f'key of the {kind} runtime')
    assert "(did you mean 'repeat'?)" in message
    assert message.endswith('it takes type, threads, warmup, repeat, cache_dir, quantile')
    assert build_runtime(dict(type=kind, repeat=3)).repeat == 3


def test_a_config_without_a_type_says_so():
    with pytest.raises(ValueError, match=r"unknown latency runtime None \(the config dict has "
                       r"no 'type'\)"):
        build_runtime(dict(repeat=3))


@pytest.mark.parametrize('dtype', [torch.float64, torch.bfloat16])
def test_onnxruntime_refuses_dtypes_it_has_no_kernels_for_before_measuring(dtype):
    with pytest.raises(ValueError, match=rf"runtime 'onnxruntime': the Sequential has {dtype} "
                       r"weights or inputs.*model\.float\(\).*runtime='torch'"):
        razorlib.prune(net().to(dtype), X.to(dtype), latency=0.6,
                       runtime=dict(type='onnxruntime', cache_dir=False))
    OnnxRuntime().check(net().half(), (X.half(), ))  # float16 has kernels


# ----------------------------------------------------------------------------- mappings
def test_keyword_inputs_reach_the_runtime_as_a_mapping():
    runtime = ParamsRuntime(cache_dir=False)
    inputs = {'image': X, 'scale': 2.0}
    slim = razorlib.prune(KeywordNet(), inputs, latency=0.5, runtime=runtime)
    assert slim.body[0].out_channels < 32
    whole = [i for i in runtime.inputs if isinstance(i, dict)]  # not the layers' tuples
    assert whole and all(i['image'] is X and i['scale'] == 2.0 for i in whole)


def test_the_key_of_keyword_inputs_names_them(tmp_path):
    pruner = ImportancePruner()
    pruner.prepare_from_supernet(KeywordNet(), {'image': X})
    meta = SubnetLatency(pruner, {'image': X, 'scale': 2.0},
                         ParamsRuntime(cache_dir=tmp_path)).table_key()[1]
    assert meta['inputs'] == {'image': [1, 3, 16, 16], 'scale': '2.0'}


@pytest.mark.parametrize('runtime', [TorchRuntime, OnnxRuntime])
def test_the_runtimes_call_a_module_with_keyword_inputs(runtime):
    (ms, ) = runtime(warmup=0, repeat=1).latency([KeywordNet()], {'image': X, 'scale': 2.0})
    assert ms > 0


def test_inputs_of_another_kind_are_refused_naming_the_kinds():
    pruner = ImportancePruner()
    pruner.prepare_from_supernet(net(), X)
    with pytest.raises(TypeError, match='a tensor, a tuple of positional tensors or a mapping'):
        SubnetLatency(pruner, [X, 'not a tensor'], ParamsRuntime(cache_dir=False))


class DictArgNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, extra):
        return self.fc(x) * extra['a']


def test_onnxruntime_refuses_a_positional_input_that_is_no_tensor():
    """Its graph inputs are flat: a dict among the positional inputs was exported (or
    failed to) without a way to tell which tensor feeds which."""
    x = torch.randn(2, 4)
    with pytest.raises(TypeError, match="runtime 'onnxruntime': positional input 1 is a dict, "
                                        'not a tensor'):
        runtime = OnnxRuntime(warmup=0, repeat=1, cache_dir=False)
        runtime.latency([DictArgNet()], (x, {'a': x}))


# ----------------------------------------------------------------------------- copies
class TiedNet(nn.Module):
    """An embedding tied to the output layer, a frozen layer and a batch norm."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.frozen = nn.Linear(4, 4).requires_grad_(False)
        self.norm = nn.BatchNorm1d(4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(self.norm(self.frozen(self.embed(ids))))


def test_copy_to_makes_each_weight_once_on_the_device_and_leaves_the_original(monkeypatch):
    model = TiedNet()
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def host_copy(tensor, memo):
        raise AssertionError(f'a host copy of a {tuple(tensor.shape)} tensor')
    monkeypatch.setattr(torch.Tensor, '__deepcopy__', host_copy)
    monkeypatch.setattr(nn.Parameter, '__deepcopy__', host_copy)
    meta = copy_to(model, 'meta', torch.float16)  # 'meta' holds no data
    monkeypatch.undo()
    assert all(t.device.type == 'meta' for t in [*meta.parameters(), *meta.buffers()])
    assert meta.head.weight is meta.embed.weight  # still tied
    assert meta.embed.weight.dtype is torch.float16
    assert meta.norm.num_batches_tracked.dtype is torch.int64  # integers are not cast
    assert not meta.frozen.weight.requires_grad and meta.embed.weight.requires_grad
    assert all(t.device.type == 'cpu' and t.dtype is before[k].dtype and torch.equal(t, before[k])
               for k, t in model.state_dict().items())


def test_copy_to_the_same_device_shares_no_storage_and_computes_the_same():
    model = TiedNet().eval()
    copied = copy_to(model, 'cpu')
    originals = {p.data_ptr() for p in model.parameters()}
    assert not originals & {p.data_ptr() for p in copied.parameters()}
    ids = torch.tensor([[1, 2, 3]]).view(-1)
    assert torch.equal(copied(ids), model(ids))


# ----------------------------------------------------------------------------- transformers
@pytest.fixture
def llama():
    transformers = pytest.importorskip('transformers')
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=256, vocab_size=100,
                                      num_hidden_layers=1, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(config).eval()


IDS = torch.randint(0, 100, (2, 10), generator=torch.Generator().manual_seed(1))


def test_hf_prune_meets_a_latency_budget_on_dict_inputs_with_the_cache_off(llama):
    hf = pytest.importorskip('razorlib.integrations.transformers')
    runtime = ParamsRuntime(cache_dir=False)
    slim = hf.prune(llama, {'input_ids': IDS}, latency=0.9, runtime=runtime)
    assert slim.config.intermediate_size < 256
    assert runtime.use_cache == {False}  # every measured model ran without its cache
    assert llama.config.use_cache


def test_onnxruntime_exports_a_transformers_model_from_keyword_inputs(llama, capfd):
    inputs = {'input_ids': IDS, 'attention_mask': torch.ones_like(IDS)}
    (ms, ) = OnnxRuntime(warmup=0, repeat=1).latency([llama], inputs)
    assert ms > 0 and llama.config.use_cache  # the cache was off for the export only


def test_onnxruntime_falls_back_to_the_dynamo_exporter_quietly(llama, capfd):
    # without an attention mask the decoder reads aten::diff, which the TorchScript
    # exporter has no ONNX op for (and prints the whole graph from C++ when it fails)
    runtime = OnnxRuntime(warmup=0, repeat=1)
    (ms, ) = runtime.latency([llama], {'input_ids': IDS})
    assert ms > 0 and type(llama) in runtime._dynamo_classes
    out, err = capfd.readouterr()
    assert 'Torch IR graph' not in out + err


def test_a_model_no_exporter_takes_is_refused_naming_runtime_and_model(llama, monkeypatch):
    def fail(name):
        def export(module, inputs):
            raise RuntimeError(f'{name} cannot\nwhole graph here')
        return export
    monkeypatch.setattr(runtimes_module, '_torchscript_export', fail('scripted'))
    monkeypatch.setattr(runtimes_module, '_dynamo_export', fail('dynamo'))
    with pytest.raises(RuntimeError) as err:
        OnnxRuntime(warmup=0, repeat=1).latency([llama], {'input_ids': IDS})
    assert str(err.value) == (
        "runtime 'onnxruntime': the LlamaForCausalLM cannot be exported to ONNX (TorchScript "
        'exporter: RuntimeError: scripted cannot; dynamo exporter: RuntimeError: dynamo '
        "cannot); measure it on runtime='torch' instead")
    assert llama.config.use_cache
