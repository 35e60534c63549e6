"""Opset imports of non-default domains: to_onnx writes each used domain at the version its
operations were imported at, and refuses what no single import can express."""
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from razorlib.ir import BaseGraph, Opset, from_onnx, to_onnx


def _chain(*steps, name='domains'):
    """x -> op_0 -> ... -> y, float [2, 3]; each step is (op type, opset, attributes)."""
    graph = BaseGraph(name)
    current = graph.create_variable('x', shape=(2, 3), dtype=torch.float32)
    graph.mark_variable_as_graph_input(current)
    for index, (op_type, opset, attributes) in enumerate(steps):
        out = graph.create_variable(f'y_{index}', shape=(2, 3), dtype=torch.float32)
        graph.create_operation(op_type, f'op_{index}', attributes, inputs=[current],
                               outputs=[out], opset=opset)
        current = out
    graph.mark_variable_as_graph_output(current)
    return graph


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])
    return session.run(None, {'x': x})[0]


def test_microsoft_domain_is_imported_at_its_version():
    model = to_onnx(_chain(('Relu', 17, {}), ('QuickGelu', Opset(1, 'com.microsoft'), {})))
    onnx.checker.check_model(model, full_check=True)
    assert [(item.domain, item.version) for item in model.opset_import] == [
        ('', 17), ('com.microsoft', 1)]
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    relu = np.maximum(x, 0)
    np.testing.assert_allclose(_run(model, x), relu / (1 + np.exp(-1.702 * relu)), rtol=1e-5)


def test_operation_of_unknown_version_is_refused_naming_it_and_its_domain():
    # Opset(domain=...) has no version: importing com.microsoft at 13 (the default domain's
    # default) made onnxruntime refuse to load the model.
    graph = _chain(('Relu', 17, {}), ('QuickGelu', Opset(domain='com.microsoft'), {}))
    with pytest.raises(ValueError, match=re.escape(
            "graph 'domains': no opset version for 'op_1' (QuickGelu of domain "
            "'com.microsoft')")):
        to_onnx(graph)


def test_mixed_versions_of_a_domain_onnx_has_no_schema_of_are_refused():
    # Exported at the highest, 2, op_0 would be read by a definition nobody checked.
    graph = _chain(('QuickGelu', Opset(1, 'com.microsoft'), {}),
                   ('QuickGelu', Opset(2, 'com.microsoft'), {}))
    with pytest.raises(ValueError, match=re.escape(
            "graph 'domains': its 'com.microsoft' operations carry different opset versions, "
            "to be exported at the highest, 2; onnx holds no schema to tell whether that "
            "version reads these alike: 'op_0' (QuickGelu of opset 1)")):
        to_onnx(graph)


def test_mixed_versions_of_an_onnx_ml_op_that_the_newer_opset_redefines_are_refused():
    graph = BaseGraph('ml')
    x = graph.create_variable('x', shape=(3, ), dtype=torch.int64)
    graph.mark_variable_as_graph_input(x)
    hidden = graph.create_variable('hidden', shape=(3, ), dtype=torch.int64)
    y = graph.create_variable('y', shape=(3, ), dtype=torch.int64)
    encoding = {'keys_int64s': [1, 2], 'values_int64s': [10, 20]}
    graph.create_operation('LabelEncoder', 'old', encoding, inputs=[x], outputs=[hidden],
                           opset=Opset(2, 'ai.onnx.ml'))
    graph.create_operation('LabelEncoder', 'new', encoding, inputs=[hidden], outputs=[y],
                           opset=Opset(4, 'ai.onnx.ml'))
    graph.mark_variable_as_graph_output(y)
    with pytest.raises(ValueError, match=re.escape(
            "its 'ai.onnx.ml' operations carry different opset versions; exported at the "
            "highest, 4, these would change meaning: 'old' (LabelEncoder of opset 2; opset 4 "
            "has LabelEncoder-4)")):
        to_onnx(graph)


def test_same_version_in_a_custom_domain_exports():
    model = to_onnx(_chain(('Foo', Opset(3, 'com.example'), {}),
                           ('Foo', Opset(3, 'com.example'), {})))
    assert [(item.domain, item.version) for item in model.opset_import] == [
        ('', 13), ('com.example', 3)]


def test_ai_onnx_spelling_is_one_import_of_the_default_domain():
    # Imported as '' and 'ai.onnx' both, onnx.checker found no Relu in the second one.
    model = to_onnx(_chain(('Relu', 17, {}), ('Relu', Opset(17, 'ai.onnx'), {})))
    onnx.checker.check_model(model, full_check=True)
    assert [(item.domain, item.version) for item in model.opset_import] == [('', 17)]


def _function_model(*functions):
    """x -> local.F -> local.G ... -> y, one call per model-local function; the model
    imports '' and 'local' only."""
    names = ['x', *[f'h_{index}' for index in range(len(functions) - 1)], 'y']
    nodes = [helper.make_node(function.name, [source], [target], domain='local')
             for function, source, target in zip(functions, names, names[1:])]
    graph = helper.make_graph(nodes, 'functions',
                              [helper.make_tensor_value_info('x', TensorProto.FLOAT, (2, 3))],
                              [helper.make_tensor_value_info('y', TensorProto.FLOAT, (2, 3))])
    return helper.make_model(graph, functions=list(functions), opset_imports=[
        helper.make_opsetid('', 17), helper.make_opsetid('local', 1)])


def _function(name, version):
    """local.<name>(a) = com.microsoft QuickGelu(a), importing com.microsoft at ``version``."""
    body = [helper.make_node('QuickGelu', ['a'], ['b'], domain='com.microsoft')]
    return helper.make_function('local', name, ['a'], ['b'], body,
                                [helper.make_opsetid('com.microsoft', version)])


def test_domain_imported_by_a_model_local_function_keeps_its_version():
    # Inlining leaves the function's import of com.microsoft behind; from_onnx refused the
    # node as of a domain the model imports no opset for.
    model = _function_model(_function('F', 1))
    onnx.checker.check_model(model, full_check=True)
    graph = from_onnx(model)
    assert [op.opset for op in graph.operations.values()] == [Opset(1, 'com.microsoft')]
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(_run(exported, x), _run(model, x))


def test_functions_importing_a_domain_at_different_versions_are_refused():
    model = _function_model(_function('F', 1), _function('G', 2))
    with pytest.raises(ValueError, match=re.escape(
            "(QuickGelu) is in domain 'com.microsoft', which the model imports no opset for; "
            "local.F import(s) it at 1; local.G import(s) it at 2")):
        from_onnx(model)
