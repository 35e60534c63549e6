"""ONNX in and out: an ONNX model (a ``ModelProto`` or a file) <-> a :class:`BaseGraph`.

Nodes become operations (same names, types, attributes, domains and opset versions),
initializers become parameter variables holding torch tensors, and the tensor types of
graph inputs, outputs and ``value_info`` become the variables' shapes and dtypes.  An
absent optional input (the empty name in ONNX) is the one variable named
:data:`~razorlib.ir.variable.EMPTY_NAME`, which no operation produces and the executor
reads as None.
``extension_attrib`` (of operations and of the graph) is never exported.
"""
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import onnx
import onnx.defs
import onnx.inliner
import torch
from google.protobuf.message import DecodeError
from onnx import AttributeProto, ModelProto, TensorProto, ValueInfoProto, helper

from ..version import __version__
from .graph import BaseGraph
from .graph_check import check_inputs_provided
from .onnx_types import onnx_dtype, tensor_from_onnx, tensor_to_onnx, torch_dtype
from .operation import DEFAULT_OPSET, Operation, Opset
from .variable import EMPTY_NAME, Dim, Variable

logger = logging.getLogger(__name__)

__all__ = ['EMPTY_LIST_TYPES', 'from_onnx', 'to_onnx']

_EXTERNAL_DATA_BYTES = 2**31 - 2**26  # protobuf refuses messages of 2 GiB; keep a margin

EMPTY_LIST_TYPES = 'onnx_empty_list_types'
"""The key of ``Operation.extension_attrib`` under which :func:`from_onnx` records the
ONNX type (``AttributeProto.FLOATS``, ...) of each empty list attribute whose op schema
onnx does not hold, so that :func:`to_onnx` writes it back as that type."""

_LIST_FIELDS = {AttributeProto.FLOATS: 'floats', AttributeProto.INTS: 'ints',
                AttributeProto.STRINGS: 'strings', AttributeProto.TENSORS: 'tensors'}

_DECODERS: Dict[int, Callable[[AttributeProto], Any]] = {
    AttributeProto.FLOAT: lambda attr: attr.f,
    AttributeProto.INT: lambda attr: attr.i,
    AttributeProto.STRING: lambda attr: attr.s.decode('utf-8'),
    AttributeProto.TENSOR: lambda attr: tensor_from_onnx(attr.t),
    AttributeProto.FLOATS: lambda attr: list(attr.floats),
    AttributeProto.INTS: lambda attr: list(attr.ints),
    AttributeProto.STRINGS: lambda attr: [item.decode('utf-8') for item in attr.strings],
    AttributeProto.TENSORS: lambda attr: [tensor_from_onnx(item) for item in attr.tensors],
}


def _load_onnx_file(path: str) -> ModelProto:
    """The model in the file at ``path``, refused with the path when it is no ONNX model: a
    file protobuf cannot parse, or an empty one (which parses as a model without a graph).
    """
    try:
        model = onnx.load(path)
    except DecodeError as err:
        raise ValueError(f'{path}: not an ONNX model ({err})') from None
    if not model.HasField('graph'):
        raise ValueError(f'{path}: not an ONNX model (it holds no graph)')
    return model


def from_onnx(model: Union[ModelProto, str, os.PathLike]) -> BaseGraph:
    """Build a graph from an ONNX model.

    Model-local functions are inlined first.  Operations keep the node order; generated
    names (for unnamed nodes or unnamed outputs) avoid every name in the model; absent
    optional outputs at the end of a node (the empty name: MaxPool's ``['y', '']``) are
    left out.  A graph output the model lists again (a TorchScript export of
    ``return y, y``) is written to a fresh variable by an ``Identity``, as the dynamo
    exporter does, so that the graph has the model's outputs, as many and in order.

    Args:
        model: a ``ModelProto``, or the path of an ``.onnx`` file (external data next to
            it is loaded).  A ``ModelProto`` must hold its tensors' data: external data
            is relative to the model file, which a ``ModelProto`` does not know.

    Returns:
        The graph, named like the ONNX graph.

    Raises:
        ValueError: ``model`` is a path to a file that holds no ONNX model (the error names
            the file); a ``ModelProto`` with tensors whose data is still in external files
            (the error names them: pass the path instead, or call
            ``onnx.load_external_data_for_model(model, folder)`` first); a string attribute
            that is not UTF-8 (the error names the node and attribute).
        NotImplementedError: a node has a subgraph (``If``, ``Loop``, ``Scan``) or
            another attribute type the IR does not hold; a tensor (initializer, graph input,
            ``value_info`` or attribute) has an element type torch has no dtype for
            (strings, 4-bit types); the error names the node or tensor.

    Example:
        >>> from onnx import helper, TensorProto
        >>> node = helper.make_node('Relu', ['x'], ['y'], name='relu')
        >>> x = helper.make_tensor_value_info('x', TensorProto.FLOAT, ['batch', 4])
        >>> y = helper.make_tensor_value_info('y', TensorProto.FLOAT, ['batch', 4])
        >>> proto = helper.make_model(helper.make_graph([node], 'tiny', [x], [y]),
        ...                           opset_imports=[helper.make_opsetid('', 17)])
        >>> graph = from_onnx(proto)
        >>> graph.operations['relu'].opset, graph.variables['y'].shape
        (Opset(version=17, domain=''), ('batch', 4))
    """
    if not isinstance(model, ModelProto):
        model = _load_onnx_file(os.fspath(model))
    _refuse_external_data(model)
    function_opsets = _function_opsets(model)
    if model.functions:
        logger.info('from_onnx: inlining %d model-local function(s)', len(model.functions))
        model = onnx.inliner.inline_local_functions(model)
    proto = model.graph
    if proto.sparse_initializer:
        raise NotImplementedError(f'ONNX graph {proto.name!r} has sparse initializers, which '
                                  'the IR does not hold; densify them first')
    opsets = {_domain(item.domain): item.version for item in model.opset_import}
    graph = BaseGraph(proto.name or 'graph')
    types = {info.name: info for info in (*proto.input, *proto.output, *proto.value_info)}
    node_names = _unique_names((node.name for node in proto.node), 'op')
    node_opsets = [_node_opset(node, name, opsets, function_opsets)
                   for node, name in zip(proto.node, node_names)]
    node_outputs = [_present_outputs(node, opset) for node, opset in zip(proto.node, node_opsets)]
    output_names = _unique_names((name for names in node_outputs for name in names),
                                 'var', reserved=_all_tensor_names(proto))

    def variable(name: str) -> Variable:
        if name not in graph.variables:
            with _naming(f'tensor {name!r}'):
                shape, dtype = _tensor_type(types.get(name))
            graph.create_variable(name, shape=shape, dtype=dtype)
        return graph.variables[name]

    for info in proto.input:
        variable(info.name)
    for initializer in proto.initializer:
        var = variable(initializer.name)
        with _naming(f'initializer {initializer.name!r}'):
            var.value = tensor_from_onnx(initializer)
        var.is_parameter = True
    outputs = iter(output_names)
    for node, name, opset, present in zip(proto.node, node_names, node_opsets, node_outputs):
        op = graph.create_operation(
            node.op_type, name, {attr.name: _decode(attr, name) for attr in node.attribute},
            inputs=[variable(item) for item in node.input],
            outputs=[variable(next(outputs)) for _ in present], opset=opset)
        _record_empty_list_types(op, node)
    for info in proto.input:
        graph.mark_variable_as_graph_input(graph.variables[info.name])
    _mark_graph_outputs(graph, [variable(info.name) for info in proto.output],
                        Opset(opsets.get(DEFAULT_OPSET.domain, DEFAULT_OPSET.version)))
    return graph


def to_onnx(graph: BaseGraph, path: Union[str, os.PathLike, None] = None,
            external_data: Optional[bool] = None) -> ModelProto:
    """Export a graph as an ONNX model, and optionally save it.

    Nodes come in topological order.  Variables with a value that no operation produces
    become initializers; other variables with a known shape or dtype get a
    ``value_info``.  A graph input holding a value (a default a fed tensor overrides) is
    declared with its :attr:`~razorlib.ir.variable.Variable.fed_shape`: its declared shape
    where the value fits it (``('N',)``, not the default's 3).  An empty list attribute is
    written as the type the op's schema gives, else as the one :func:`from_onnx`
    recorded, else as INTS.
    Each domain its operations use is imported at the highest opset version
    they carry (the default domain always, at ``DEFAULT_OPSET``'s version when no operation
    uses it); an operation of an older version whose op that version redefines, or whose
    schema onnx does not hold (``com.microsoft``, custom domains), is refused, as runtimes
    would read it by the new definition.
    ``onnx.checker`` wants a shape on every graph input and output;
    :meth:`TorchExecutor.tracing_operation_meta` fills them in.

    Args:
        graph: the graph to export.
        path: where to save the model; nothing is saved when None.
        external_data: save the tensors in ``<path>.data`` next to the model, replacing
            that file.  None chooses it when they would not fit a 2 GiB protobuf message.
            Saving with external data strips the tensors from the returned model.

    Returns:
        The ONNX model.

    Raises:
        ValueError: an operation reads, or the graph returns, a variable that nothing
            produces, that has no value and that is not a graph input; an operation of a
            non-default domain has no opset version; or operations of one domain carry
            versions whose definitions differ, or may, e.g. a Softmax of opset 11 (2-D
            flattening) with a Gelu of opset 20 (Softmax-13 normalizes one axis): the error
            names each such operation with its domain and version.

    Example:
        >>> import onnx, torch
        >>> graph = BaseGraph('tiny')
        >>> x = graph.create_variable('x', shape=(1, 4), dtype=torch.float32)
        >>> graph.mark_variable_as_graph_input(x)
        >>> y = graph.create_variable('y', shape=(1, 4), dtype=torch.float32)
        >>> relu = graph.create_operation('Relu', 'relu', inputs=[x], outputs=[y], opset=17)
        >>> graph.mark_variable_as_graph_output(relu.outputs[0])
        >>> model = to_onnx(graph)
        >>> onnx.checker.check_model(model)
        >>> [node.op_type for node in model.graph.node], model.opset_import[0].version
        (['Relu'], 17)
    """
    operations = graph.topological_sort()
    check_inputs_provided(graph)
    opsets = _domain_versions(graph, operations)
    opset_imports = [helper.make_opsetid(domain, version) for domain, version in opsets.items()]
    constants = [var for var in graph.variables.values()
                 if var.value is not None and var.source_op is None]
    boundary = {*graph.inputs, *graph.outputs, EMPTY_NAME}
    described = [var for var in graph.variables.values()
                 if var.name not in boundary and var.value is None
                 and (var.shape is not None or var.dtype is not None)]
    proto = helper.make_graph(
        [_node(op) for op in operations], graph.name,
        [_value_info(var, var.fed_shape) for var in graph.inputs.values()],
        [_value_info(var, var.shape) for var in graph.outputs.values()],
        initializer=[tensor_to_onnx(var.value, var.name) for var in constants],
        value_info=[_value_info(var, var.shape) for var in described])
    model = helper.make_model(proto, opset_imports=opset_imports, producer_name='razorlib',
                              producer_version=__version__)
    model.ir_version = helper.find_min_ir_version_for(opset_imports, ignore_unknown=True)
    if path is not None:
        _save(model, Path(path), external_data)
    return model


def _save(model: ModelProto, path: Path, external_data: Optional[bool]) -> None:
    """Save ``model`` at ``path``, its tensors in ``<path>.data`` when ``external_data`` (None:
    when they would not fit a protobuf message).  onnx appends to an existing data file, so
    the one this save writes is removed first: a second save would otherwise leave the
    first's bytes in it, the file growing with every save."""
    if external_data is None:
        external_data = sum(len(item.raw_data)
                            for item in model.graph.initializer) > _EXTERNAL_DATA_BYTES
    location = f'{path.name}.data'
    if external_data:
        path.with_name(location).unlink(missing_ok=True)
    onnx.save_model(model, os.fspath(path), save_as_external_data=external_data,
                    location=location, size_threshold=0)


# Import helpers.

def _domain(domain: str) -> str:
    return '' if domain == 'ai.onnx' else domain


def _tensor_type(info: Optional[ValueInfoProto]
                 ) -> Tuple[Optional[Tuple[Dim, ...]], Optional[torch.dtype]]:
    if info is None or not info.type.HasField('tensor_type'):
        return None, None
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField('shape'):
        return None, torch_dtype(tensor_type.elem_type)
    shape = tuple(dim.dim_value if dim.HasField('dim_value') else
                  dim.dim_param if dim.HasField('dim_param') else None
                  for dim in tensor_type.shape.dim)
    return shape, torch_dtype(tensor_type.elem_type)


def _decode(attr: AttributeProto, node: str) -> Any:
    if attr.type not in _DECODERS:
        kind = AttributeProto.AttributeType.Name(attr.type)
        raise NotImplementedError(f'node {node!r}: attribute {attr.name!r} is of type {kind}, '
                                  'which the IR does not hold (subgraphs are not supported)')
    with _naming(f'node {node!r}: attribute {attr.name!r}'):
        return _DECODERS[attr.type](attr)


@contextmanager
def _naming(owner: str) -> Iterator[None]:
    """Re-raise a conversion error with ``owner`` (a tensor, or a node's attribute) named,
    since the error alone (``ONNX element type STRING has no torch dtype``) does not say
    which of a model's many tensors is at fault.

    A ``TypeError`` here is :func:`torch_dtype` refusing an element type torch lacks.
    """
    try:
        yield
    except UnicodeDecodeError as error:
        raise ValueError(f'{owner}: the string is not UTF-8 text ({error})') from error
    except TypeError as error:
        raise NotImplementedError(f'{owner}: {error}, so the IR cannot hold it') from error


def _stored_tensors(model: ModelProto) -> Iterator[TensorProto]:
    """The tensors whose data a model stores: initializers and attribute tensors, of the
    graph and of model-local functions."""
    yield from model.graph.initializer
    nodes = [*model.graph.node, *(node for function in model.functions for node in function.node)]
    for attr in (attr for node in nodes for attr in node.attribute):
        if attr.HasField('t'):
            yield attr.t
        yield from attr.tensors


def _refuse_external_data(model: ModelProto) -> None:
    """Refuse tensors whose data is still in external files (``onnx.load(path,
    load_external_data=False)``).  Their locations are relative to the model file's folder,
    which a ``ModelProto`` does not record; onnx would read them relative to the working
    directory, silently taking another model's weights from a file of the same name there.
    """
    external = [tensor for tensor in _stored_tensors(model)
                if tensor.data_location == TensorProto.EXTERNAL]
    if not external:
        return
    files = sorted({entry.value for tensor in external for entry in tensor.external_data
                    if entry.key == 'location'})
    names = [tensor.name for tensor in external]
    raise ValueError(f'ONNX graph {model.graph.name!r}: tensors {names} keep their data in '
                     f'external file(s) {files}, relative to the model file\'s folder, which '
                     'a ModelProto does not record; pass from_onnx the model file\'s path, or '
                     'call onnx.load_external_data_for_model(model, <that folder>) first')


def _record_empty_list_types(op: Operation, node: onnx.NodeProto) -> None:
    """Record the type of each empty list attribute of ``node`` that no onnx schema gives
    (see :data:`EMPTY_LIST_TYPES`): an empty Python list does not say what it lists."""
    empty = {attr.name: attr.type for attr in node.attribute
             if attr.type in _LIST_FIELDS and not getattr(attr, _LIST_FIELDS[attr.type])
             and _schema_attribute_type(op, attr.name) is None}
    if empty:
        op.extension_attrib[EMPTY_LIST_TYPES] = empty


def _mark_graph_outputs(graph: BaseGraph, outputs: List[Variable], opset: Opset) -> None:
    """Make ``outputs`` the graph outputs, in order.  ``graph.outputs`` holds a variable
    once, but a model that lists an output twice returns it twice: each repeat becomes a
    fresh variable that an ``Identity`` of ``opset`` writes."""
    for var in outputs:
        if var.name in graph.outputs:
            alias = graph.create_variable(shape=var.shape, dtype=var.dtype)
            graph.create_operation('Identity', inputs=[var], outputs=[alias], opset=opset)
            var = alias
        graph.mark_variable_as_graph_output(var)


def _present_outputs(node: onnx.NodeProto, opset: Opset) -> List[str]:
    """``node``'s output names without the absent optional outputs at the end.

    ONNX writes an optional output that is not wanted as the empty name (MaxPool's
    ``['y', '']``).  Named afresh it would be a wanted output: the kernel would compute it
    (MaxPool's Indices, refused with asymmetric pads that the values alone run with) and
    ``to_onnx`` would ask runtimes for it.  Only outputs the op's onnx schema marks optional
    are left out; an empty name before a present output keeps its place (and gets a name).
    """
    names = list(node.output)
    schema = _schema(node.op_type, opset.version, opset.domain)
    if schema is None:
        return names
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    while (names and not names[-1] and len(names) <= len(schema.outputs)
           and schema.outputs[len(names) - 1].option == optional):
        names.pop()
    return names


def _all_tensor_names(proto: onnx.GraphProto) -> set:
    names = {info.name for info in (*proto.input, *proto.output, *proto.value_info)}
    names.update(item.name for item in proto.initializer)
    for node in proto.node:
        names.update(node.input)
        names.update(node.output)
    return names


def _unique_names(names: Iterable[str], prefix: str, reserved: Iterable[str] = ()) -> List[str]:
    """The names, with empty or repeated ones replaced by fresh ``prefix_<n>`` names."""
    names = list(names)
    taken = set(reserved) | set(names)
    seen, result, counter = set(), [], 0
    for name in names:
        if not name or name in seen:
            while f'{prefix}_{counter}' in taken:
                counter += 1
            name = f'{prefix}_{counter}'
            taken.add(name)
        seen.add(name)
        result.append(name)
    return result


def _function_opsets(model: ModelProto) -> Dict[str, Dict[int, List[str]]]:
    """For each domain, the versions model-local functions import it at, and which do.

    A function imports the domains its body uses; inlining moves the body into the graph
    and leaves those imports behind, so a node of a domain that the model itself does not
    import takes its version from them.
    """
    versions: Dict[str, Dict[int, List[str]]] = {}
    for function in model.functions:
        for item in function.opset_import:
            versions.setdefault(_domain(item.domain), {}).setdefault(item.version, []).append(
                f'{function.domain}.{function.name}' if function.domain else function.name)
    return versions


def _node_opset(node: onnx.NodeProto, name: str, opsets: Dict[str, int],
                function_opsets: Dict[str, Dict[int, List[str]]]) -> Opset:
    """The opset of ``node``: its domain as the model imports it, else as the model-local
    functions do when they agree on one version."""
    domain = _domain(node.domain)
    if domain in opsets:
        return Opset(opsets[domain], domain)
    versions = function_opsets.get(domain, {})
    if len(versions) == 1:
        return Opset(next(iter(versions)), domain)
    imports = ''.join(f'; {", ".join(functions)} import(s) it at {version}'
                      for version, functions in sorted(versions.items()))
    raise ValueError(f'node {name!r} ({node.op_type}) is in domain {domain!r}, which the model '
                     f'imports no opset for{imports}')


# Export helpers.

def _domain_versions(graph: BaseGraph, operations: List[Operation]) -> Dict[str, int]:
    """The version each domain the operations use is imported at: the highest they carry
    (the default domain always, at ``DEFAULT_OPSET``'s version when no operation uses it).

    Refused: an operation of unknown version (a non-default domain without one), and
    operations that the domain's version would read otherwise (:func:`_check_one_definition`).
    """
    unknown = [f'{op.name!r} ({op.type} of domain {op.opset.domain!r})' for op in operations
               if op.opset.version is None]
    if unknown:
        raise ValueError(f'graph {graph.name!r}: no opset version for {", ".join(unknown)}, '
                         'so no opset import can be written for its domain; give the '
                         'operation an Opset(version, domain), e.g. Opset(1, "com.microsoft")')
    versions: Dict[str, int] = {}
    for op in operations:
        versions[op.opset.domain] = max(versions.get(op.opset.domain, 0), op.opset.version)
    versions = {DEFAULT_OPSET.domain: versions.pop(DEFAULT_OPSET.domain, DEFAULT_OPSET.version),
                **versions}
    for domain, version in versions.items():
        _check_one_definition(graph, [op for op in operations if op.opset.domain == domain],
                              domain, version)
    return versions


def _check_one_definition(graph: BaseGraph, operations: List[Operation], domain: str,
                          version: int) -> None:
    """Refuse operations of ``domain`` that its opset ``version`` defines otherwise, or may.

    A model imports a domain at one version, so an operation made for an older one is read
    by the definition current at ``version``; where that differs it may fail to load, or
    (Softmax, LogSoftmax, Hardmax before 13) silently compute something else.  Where onnx
    holds no schema of the operation (``com.microsoft`` or a custom domain), whether the
    definitions differ cannot be told, and the operation is refused as well.
    """
    older = [op for op in operations if op.opset.version != version]
    owner = 'default-domain' if domain == DEFAULT_OPSET.domain else repr(domain)
    unknown = [f'{op.name!r} ({op.type} of opset {op.opset.version})' for op in older
               if _since(op.type, op.opset.version, domain) is None
               and _since(op.type, version, domain) is None]
    if unknown:
        raise ValueError(f'graph {graph.name!r}: its {owner} operations carry different opset '
                         f'versions, to be exported at the highest, {version}; onnx holds no '
                         f'schema to tell whether that version reads these alike: '
                         f'{", ".join(unknown)}.  Give the domain\'s operations one version')
    redefined = [f'{op.name!r} ({op.type} of opset {op.opset.version}; opset {version} '
                 f'has {op.type}-{_since(op.type, version, domain)})' for op in older
                 if _since(op.type, op.opset.version, domain) != _since(op.type, version, domain)]
    if redefined:
        raise ValueError(f'graph {graph.name!r}: its {owner} operations carry different opset '
                         f'versions; exported at the highest, {version}, these would change '
                         f'meaning: {", ".join(redefined)}.  Convert the model to one opset '
                         '(onnx.version_converter) before adding newer operations')


def _schema(op_type: str, version: int, domain: str) -> Optional[onnx.defs.OpSchema]:
    """The schema of ``op_type`` current at ``version`` of ``domain``; None where onnx holds
    none (``com.microsoft``, custom domains)."""
    try:
        return onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:
        return None


def _since(op_type: str, version: int, domain: str) -> Optional[int]:
    """The version that introduced the definition of ``op_type`` current at ``version`` of
    ``domain``; None where onnx holds no such schema."""
    schema = _schema(op_type, version, domain)
    return None if schema is None else schema.since_version


def _schema_attribute_type(op: Operation, name: str) -> Optional[int]:
    """The ``AttributeProto`` type of ``op``'s attribute ``name`` by its onnx schema; None
    where onnx holds no schema of the op or the schema no such attribute."""
    schema = _schema(op.type, op.opset.version, op.opset.domain)
    attribute = None if schema is None else schema.attributes.get(name)
    return None if attribute is None else attribute.type.value


def _node(op: Operation) -> onnx.NodeProto:
    node = helper.make_node(op.type, [var.name for var in op.inputs],
                            [var.name for var in op.outputs], name=op.name,
                            domain=op.opset.domain)
    node.attribute.extend(_encode(name, value, op) for name, value in op.attributes.items())
    return node


def _encode(name: str, value: Any, op: Operation) -> AttributeProto:
    if isinstance(value, torch.Tensor):
        value = tensor_to_onnx(value)
    elif isinstance(value, (list, tuple)):
        if not value:
            return helper.make_attribute(name, [], attr_type=_empty_list_type(op, name))
        value = [tensor_to_onnx(item) if isinstance(item, torch.Tensor) else item
                 for item in value]
    try:
        return helper.make_attribute(name, value)
    except (TypeError, ValueError) as error:
        raise TypeError(f'operation {op.name!r}: attribute {name!r} = {value!r} has no ONNX '
                        f'attribute type ({error})') from error


def _empty_list_type(op: Operation, name: str) -> int:
    """The type to write ``op``'s empty list attribute ``name`` as.  An empty list does not
    say what it lists, and the wrong type changes meaning (``Constant(value_floats=[])``
    written as INTS makes an int64 tensor): the schema's type, else the one recorded on
    import (:data:`EMPTY_LIST_TYPES`), else INTS."""
    return (_schema_attribute_type(op, name)
            or op.extension_attrib.get(EMPTY_LIST_TYPES, {}).get(name, AttributeProto.INTS))


def _value_info(var: Variable, shape: Optional[Tuple[Dim, ...]]) -> ValueInfoProto:
    return helper.make_tensor_value_info(var.name, onnx_dtype(var.dtype), shape)
