"""Every pass on zoo model graphs: ``check()`` holds and the outputs stay the same (1e-5)."""
import warnings

import pytest
import torch
from torch.utils._pytree import tree_leaves

from razorlib.ir import PassManager, from_torch
from pass_helpers import run_pass
from zoo import ZOO

# Shared parameters, Constant nodes (TorchScript), BatchNormalizations after a Concat,
# attention blocks; each exported the way that leaves the passes the most to look at.
MODELS = [('vit', 'dynamo'), ('fpn_shared_head', 'dynamo'), ('densenet', 'dynamo'),
          ('mobilenet_v2', 'torchscript'), ('conv1d_gn', 'torchscript')]
FORMATTER_PASSES = ['format_constant', 'format_parameter']
MERGER_PASSES = ['fuse_bn', 'fuse_gemm', 'fuse_bias_add', 'fuse_layernorm', 'fuse_gelu']


@pytest.fixture(scope='module', params=MODELS, ids='-'.join)
def exported(request):
    name, exporter = request.param
    entry = ZOO[name]
    inputs = entry.example_inputs()
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)  # the TorchScript exporter's
        graph = from_torch(entry.build().eval(), inputs, exporter=exporter)
    inputs = list(inputs.values()) if isinstance(inputs, dict) else tree_leaves(inputs)
    return name, graph, inputs


def test_passes_keep_the_graph_coherent_and_its_outputs(exported):
    _, graph, inputs = exported
    graph = graph.copy()
    count = len(graph.operations)
    changes = {}
    for name in FORMATTER_PASSES + MERGER_PASSES:
        changes[name] = run_pass(graph, name, inputs)
    run_pass(graph, 'delete_isolated', inputs)
    # Every replaced Constant and every fusion takes at least one operation away.
    fewer = changes['format_constant'] + sum(changes[name] for name in MERGER_PASSES)
    assert len(graph.operations) <= count - fewer
    # A second round finds nothing left to do.
    assert not PassManager(FORMATTER_PASSES + MERGER_PASSES)(graph).modified
