"""Long random edit sequences keep every graph invariant, and failed edits change nothing."""
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from razorlib.ir import (BaseGraph, Operation, OperationQuantizationConfig,
                         QuantableOperation, TensorQuantizationConfig)
from ir_helpers import structure

OP_TYPES = ('Conv', 'Add', 'Relu', 'Concat', 'Split', 'Reshape')
EDITS = ('create_op', 'create_param', 'insert_op_before', 'insert_op_after', 'remove_op',
         'remove_var', 'link_op', 'link_var', 'mark_input', 'mark_output', 'copy', 'quantize')

op_specs = st.lists(st.tuples(st.sampled_from(OP_TYPES), st.lists(st.integers(0, 99), max_size=3),
                              st.integers(1, 2)), min_size=1, max_size=6)
edit_steps = st.lists(st.tuples(st.sampled_from(EDITS), st.integers(0, 999), st.integers(0, 999),
                                st.booleans()), min_size=200, max_size=240)
FAST = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def build(specs):
    graph = BaseGraph('random')
    graph.mark_variable_as_graph_input(graph.create_variable('in'))
    for op_type, picks, num_outputs in specs:
        pool = list(graph.variables.values())
        inputs = [pool[pick % len(pool)] for pick in picks]
        if op_type == 'Conv':
            inputs.append(graph.create_variable(value=torch.ones(2), is_parameter=True))
        outputs = [graph.create_variable() for _ in range(num_outputs)]
        graph.create_operation(op_type, inputs=inputs, outputs=outputs)
    graph.mark_variable_as_graph_output(list(graph.variables.values())[-1])
    return graph


def pick(items, index):
    items = list(items)
    return items[index % len(items)] if items else None


def quantize(graph, op, link_producers):
    config = OperationQuantizationConfig(
        [TensorQuantizationConfig() for _ in op.inputs],
        [TensorQuantizationConfig() for _ in op.outputs])
    quantable = QuantableOperation(op, config)
    graph.replace_operation(op, quantable)
    for config, var in zip(quantable.input_quant_config, quantable.inputs):
        producer = var.source_op
        if link_producers and isinstance(producer, QuantableOperation) and var in producer.outputs:
            index = producer.outputs.index(var)
            if index < len(producer.output_quant_config):
                config.dominated_by = producer.output_quant_config[index]
    if quantable.num_of_input >= 2:
        quantable.input_quant_config[-1].master_by = quantable.input_quant_config[0]


def apply(graph, edit, a, b, flag):
    """Run one edit; returns the graph to go on with (a copy after ``copy``)."""
    ops, variables = list(graph.operations.values()), list(graph.variables.values())
    op, var = pick(ops, a), pick(variables, a)
    if edit == 'create_op':
        inputs = [pick(variables, a + i) for i in range(b % 3) if variables]
        outputs = [graph.create_variable() for _ in range(int(flag))]
        graph.create_operation(pick(OP_TYPES, b), inputs=inputs, outputs=outputs)
    elif edit == 'create_param' and op is not None:
        graph.create_variable(value=torch.full((2, ), float(b)), is_parameter=True, dest_ops=[op])
    elif edit in ('insert_op_before', 'insert_op_after') and op is not None:
        edges = op.inputs if edit == 'insert_op_before' else op.outputs
        getattr(graph, edit)(Operation(f'inserted_{b}', 'Identity'), op, b % (len(edges) + 1))
    elif edit == 'remove_op' and op is not None:
        graph.remove_operation(op, keep_coherence=flag)
    elif edit == 'remove_var' and var is not None:
        graph.remove_variable(var)
    elif edit == 'link_op' and op is not None:
        graph.create_link_with_op(op, pick(ops, b), pick(variables, b) if flag else None)
    elif edit == 'link_var' and var is not None:
        graph.create_link_with_var(var, pick(variables, b))
    elif edit == 'mark_input' and var is not None:
        graph.mark_variable_as_graph_input(var)
    elif edit == 'mark_output' and var is not None:
        graph.mark_variable_as_graph_output(var)
    elif edit == 'copy':
        return graph.copy(copy_value=flag)
    elif edit == 'quantize' and op is not None and not isinstance(op, QuantableOperation):
        quantize(graph, op, flag)
    return graph


def assert_sort_is_consistent(graph):
    try:
        order = graph.topological_sort()
    except ValueError as error:
        assert has_cycle(graph), str(error)
        return
    assert sorted(op.name for op in order) == sorted(graph.operations)
    position = {op.name: index for index, op in enumerate(order)}
    for op in order:
        for upstream in graph.get_upstream_operations(op):
            assert position[upstream.name] < position[op.name]


def has_cycle(graph):
    state = {}

    def visit(op):
        state[op.name] = 'open'
        for dest in graph.get_downstream_operations(op):
            if state.get(dest.name) == 'open' or (dest.name not in state and visit(dest)):
                return True
        state[op.name] = 'done'
        return False
    return any(visit(op) for op in graph.operations.values() if op.name not in state)


def configs_of(graph):
    return {(op.name, side, index): config
            for op in graph.operations.values() if isinstance(op, QuantableOperation)
            for side, configs in (('in', op.input_quant_config), ('out', op.output_quant_config))
            for index, config in enumerate(configs)}


def assert_copy_is_faithful(original, clone):
    clone.check()
    assert structure(clone) == structure(original)
    originals, clones = configs_of(original), configs_of(clone)
    assert originals.keys() == clones.keys()
    owner = {id(config): key for key, config in originals.items()}
    assert not {id(c) for c in clones.values()} & set(owner)
    for key, config in originals.items():
        for link in ('dominated_by', 'master_by'):
            target, cloned_target = getattr(config, link), getattr(clones[key], link)
            assert (target is None) == (cloned_target is None)
            assert cloned_target is None or id(cloned_target) not in owner
            if target is not None and id(target) in owner:
                assert cloned_target is clones[owner[id(target)]]


def run(specs, steps):
    graph = build(specs)
    graph.check()
    left_behind = []
    for edit, a, b, flag in steps:
        before = structure(graph)
        try:
            result = apply(graph, edit, a, b, flag)
        except ValueError:
            assert structure(graph) == before, edit
            result = graph
        if result is not graph:
            assert_copy_is_faithful(graph, result)
            left_behind.append((graph, structure(graph)))
            graph = result
        graph.check()
        assert_sort_is_consistent(graph)
    for old, snapshot in left_behind:
        old.check()
        assert structure(old) == snapshot
    return graph


@FAST
@given(op_specs, edit_steps)
def test_random_edits_keep_the_graph_coherent(specs, steps):
    run(specs, steps)


@settings(FAST, max_examples=15)
@given(op_specs, edit_steps)
def test_same_edits_give_the_same_names_and_orders(specs, steps):
    first, second = run(specs, steps), run(specs, steps)
    assert structure(first) == structure(second)
