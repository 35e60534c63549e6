"""GraphPass and PassManager: requirements and guarantees checked, rounds, errors, configs."""
import pytest
import torch

from razorlib.ir import BaseGraph, GraphCheckError, GraphPass, PassManager, PassResult
from razorlib.ir.passes import FuseBatchNorm, build_pass
from razorlib.registry import GRAPH_PASSES


class CountDown(GraphPass):
    """Removes one variable named ``drop<i>`` per call while any is left."""

    def call(self, graph):
        doomed = sorted(name for name in graph.variables if name.startswith('drop'))[:1]
        for name in doomed:
            graph.remove_variable(graph.variables[name])
        return PassResult.counted(graph, len(doomed))


def graph_with(*names):
    graph = BaseGraph()
    for name in names:
        graph.create_variable(name)
    return graph


def test_a_manager_runs_rounds_until_nothing_changes():
    graph = graph_with('drop0', 'drop1', 'keep')
    manager = PassManager([CountDown()], steps=5)
    result = manager(graph)
    assert (result.modified, result.changes, manager.rounds) == (True, 2, 3)
    assert list(graph.variables) == ['keep']
    assert PassManager([CountDown()], steps=1)(graph_with('drop0', 'drop1')).changes == 1
    late = PassManager([CountDown()], steps=4, early_stop=False)
    assert late(graph_with('drop0')).changes == 1 and late.rounds == 4


def test_passes_are_built_from_names_and_config_dicts():
    manager = PassManager(['fuse_bn', dict(type='FuseGemm'), FuseBatchNorm()])
    assert [type(item).__name__ for item in manager.passes] == ['FuseBatchNorm', 'FuseGemm',
                                                                'FuseBatchNorm']
    assert GRAPH_PASSES.get('FuseBatchNorm') is GRAPH_PASSES.get('fuse_bn') is FuseBatchNorm
    with pytest.raises(KeyError, match="no graph pass 'fuse_all'.*registered: .*FuseGemm"):
        build_pass('fuse_all')
    with pytest.raises(KeyError, match='needs a "type" key'):
        build_pass(dict(steps=2))
    with pytest.raises(ValueError, match='steps must be at least 1'):
        PassManager(['fuse_bn'], steps=0)


def test_ensures_runs_graph_check_and_names_the_pass():
    class Breaks(GraphPass):
        def call(self, graph):
            graph.inputs['ghost'] = graph.create_variable('ghost')
            del graph.variables['ghost']
            return PassResult(graph, True)

    with pytest.raises(GraphCheckError) as error:
        PassManager(['delete_isolated', Breaks()])(BaseGraph())
    notes = '\n'.join(error.value.__notes__)
    assert 'after graph pass Breaks' in notes and 'passes run before it in that round: ' \
        'DeleteIsolated' in notes


def test_requires_is_checked_before_the_pass_runs():
    class NeedsShapes(GraphPass):
        def requires(self, graph):
            unknown = [name for name, var in graph.inputs.items() if var.shape is None]
            if unknown:
                raise ValueError(f'inputs without a shape: {unknown}')

        def call(self, graph):
            raise AssertionError('not reached')

    graph = BaseGraph()
    graph.mark_variable_as_graph_input(graph.create_variable('x'))
    with pytest.raises(ValueError, match=r"inputs without a shape: \['x'\]") as error:
        NeedsShapes()(graph)
    assert error.value.__notes__ == ['in the requirements of graph pass NeedsShapes']


def test_a_pass_must_return_its_graph_in_a_pass_result():
    class ReturnsCount(GraphPass):
        def call(self, graph):
            return 0

    class ReturnsCopy(GraphPass):
        def call(self, graph):
            return PassResult(graph.copy(), False)

    with pytest.raises(TypeError, match='ReturnsCount returned int'):
        ReturnsCount()(BaseGraph())
    with pytest.raises(RuntimeError, match='ReturnsCopy returned another graph'):
        ReturnsCopy()(BaseGraph())


def test_a_pass_takes_the_result_of_the_previous_one():
    graph = BaseGraph()
    w = graph.create_variable('w', torch.ones(2, 1, 1, 1), is_parameter=True)
    graph.create_operation('Conv', 'conv', inputs=[graph.create_variable('x'), w])
    result = build_pass('delete_isolated')(build_pass('format_parameter')(graph))
    assert result.graph is graph and result.changes == 3  # conv, x and w
    assert not graph.operations and not graph.variables
