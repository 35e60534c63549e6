"""TorchExecutor: run a graph op by op with torch, with hooks around every operation.

The executor is an interpreter in the style of ``torch.fx.Interpreter``: a loop over the
operations in topological order that calls :meth:`TorchExecutor.run_operation` on each.
Kernels are resolved (and attributes and constant control inputs decoded) once, when the
executor is built; a graph input is never such a constant, even when it holds a value (a
default, which a fed tensor replaces).  The loop only gathers tensors, calls hooks and
kernels, and frees each intermediate tensor after its last reader.  Every graph input is
checked against its shape (:mod:`~razorlib.ir.executor.shapes`): fixed axes must match,
dynamic ones take any size.
"""
import logging
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch.utils.hooks import RemovableHandle

from ..graph import BaseGraph
from ..graph_check import check_inputs_provided
from ..operation import Operation
from ..variable import EMPTY_NAME
from . import ops  # noqa: F401  fills OP_TABLE
from .kernels import Kernel, build_kernel
from .ops.common import fed_variables
from .shapes import check_input_dtype, check_input_shape, dynamic_axes, grow_along, merge_shape

logger = logging.getLogger(__name__)

__all__ = ['PostHook', 'PreHook', 'TorchExecutor']

Tensors = List[Optional[torch.Tensor]]
PreHook = Callable[[Operation, Tensors], Optional[Sequence[Optional[torch.Tensor]]]]
"""``hook(op, inputs)`` before ``op`` runs; returning a sequence replaces the inputs."""
PostHook = Callable[[Operation, Tensors, List[torch.Tensor]],
                    Optional[Sequence[torch.Tensor]]]
"""``hook(op, inputs, outputs)`` after ``op`` ran; returning a sequence replaces the outputs."""

GraphInputs = Union[torch.Tensor, Sequence[Any], Mapping[str, Any]]
_Step = Tuple[Operation, Tuple[str, ...], Tuple[str, ...], Tuple[str, ...]]


class TorchExecutor:
    """Runs a :class:`~razorlib.ir.graph.BaseGraph` with torch, one operation at a time.

    Building the executor moves the graph's constants (parameters and other values no
    operation produces) to ``device``, in place, and resolves one kernel per operation
    from :data:`~razorlib.ir.executor.kernels.OP_TABLE`.  Parameter values are read
    from the graph at every run, so new values set on the variables take effect; attributes,
    the graph's structure and constant control inputs (shapes, axes, pads, bounds) are
    read once, so build a new executor after editing those.  Runs happen under
    ``torch.no_grad()``.

    Subclasses may override :meth:`build_kernel` (which kernel an operation gets) and
    :meth:`run_operation` (how an operation runs, e.g. with fake quantization).

    Args:
        graph: the graph to run.
        device: where to run it (``'cpu'``, ``'cuda'``, a ``torch.device``).

    Raises:
        UnsupportedOperationError: an operation has no kernel; the error names its type
            and node.
        ValueError: an operation reads a variable nothing provides (see
            :func:`~razorlib.ir.graph_check.check_inputs_provided`).

    Running raises :class:`~razorlib.ir.executor.shapes.InputShapeError` (a
    ``ValueError``) for a tensor whose shape differs from its graph input's on a fixed
    axis, naming the input, the expected and the given shape, and
    :class:`~razorlib.ir.executor.shapes.InputDtypeError` (a ``TypeError``) for a tensor
    of a dtype its graph input does not take (exact widening casts within a kind, float16
    to float32, are made; see :func:`~razorlib.ir.executor.shapes.check_input_dtype`).

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> graph.mark_variable_as_graph_input(x)
        >>> two = graph.create_variable('two', torch.tensor(2.0), is_parameter=True)
        >>> mul = graph.create_operation('Mul', 'mul', inputs=[x, two],
        ...                              outputs=[graph.create_variable('y')])
        >>> graph.mark_variable_as_graph_output(mul.outputs[0])
        >>> executor = TorchExecutor(graph)
        >>> seen = []
        >>> handle = executor.register_forward_hook(
        ...     lambda op, inputs, outputs: seen.append(op.name))
        >>> executor(torch.tensor([1.0, -3.0])), seen
        ([tensor([ 2., -6.])], ['mul'])
        >>> executor.tracing_operation_meta(torch.zeros(2, 3))
        >>> graph.variables['y'].shape, graph.variables['y'].dtype
        ((2, 3), torch.float32)
    """

    def __init__(self, graph: BaseGraph, device: Union[str, torch.device] = 'cpu') -> None:
        check_inputs_provided(graph)
        self.graph = graph
        self.device = torch.device(device)
        self._constants = [var for var in graph.variables.values()
                           if var.value is not None and var.source_op is None]
        for var in self._constants:
            var.value = var.value.to(self.device)
        self._operations = graph.topological_sort()
        with fed_variables(graph.inputs):  # a graph input's value is a default, no constant
            self._kernels: Dict[Operation, Kernel] = {op: self.build_kernel(op)
                                                      for op in self._operations}
        self._plans: Dict[Tuple[str, ...], List[_Step]] = {}
        # OrderedDicts, as torch's RemovableHandle keeps a weak reference to them.
        self._pre_hooks: Dict[int, PreHook] = OrderedDict()
        self._post_hooks: Dict[int, PostHook] = OrderedDict()

    # Overridable per operation.

    def build_kernel(self, op: Operation) -> Kernel:
        """The kernel ``op`` runs with; by default the one :data:`OP_TABLE` builds."""
        return build_kernel(op, self.device)

    def run_operation(self, op: Operation, inputs: Tensors) -> List[torch.Tensor]:
        """Run one operation on its input tensors (None for an absent optional input).

        Returns:
            The output tensors, one per output of ``op``.
        """
        result = self._kernels[op](*inputs)
        return [result] if isinstance(result, torch.Tensor) else list(result)

    # Running.

    def forward(self, inputs: GraphInputs,
                output_names: Optional[Sequence[str]] = None) -> List[torch.Tensor]:
        """Run the graph.

        Args:
            inputs: one tensor (a graph with one input), a sequence in graph input order,
                or a dict by input name (inputs that have a value may be left out).
            output_names: the variables to return; the graph outputs by default.

        Returns:
            The tensors of ``output_names``, in that order.
        """
        return self._run(self._feed(inputs), self._names(output_names))

    __call__ = forward

    def tracing_operation_meta(self, inputs: GraphInputs) -> None:
        """Run the graph and set the shape and dtype of every variable it computes.

        Graph inputs and operation outputs get the shape and dtype of their tensors;
        variables with a value report the value's already.  Axes stay dynamic where the
        graph has dynamic input axes (``'batch'``): the graph runs a second time with
        those axes one longer, and every axis whose size follows becomes a named dynamic
        axis (the input axis's name when the sizes match), so an exported graph keeps
        them.

        Args:
            inputs: as for :meth:`forward`.
        """
        env = self._feed(inputs)
        traced = self._trace_shapes(env)
        grown = {name: dynamic_axes(self.graph.variables[name]) for name in self.graph.inputs}
        other = None
        if any(grown.values()):
            env = self._feed(inputs)
            for name, axes in grown.items():
                if env.get(name) is not None:
                    env[name] = grow_along(env[name], axes)
            try:
                other = self._trace_shapes(env)
            except Exception as error:  # a graph that fixes its "dynamic" axis somewhere
                logger.warning('tracing_operation_meta: graph %r did not run with its dynamic '
                               'input axes grown (%s: %s); every shape is recorded as traced',
                               self.graph.name, type(error).__name__, error)
        names = {traced[name][0][axis]: var.shape[axis]
                 for name, var in self.graph.inputs.items() if name in traced
                 for axis in dynamic_axes(var) if isinstance(var.shape[axis], str)}
        for name, (shape, dtype) in traced.items():
            var = self.graph.variables[name]
            if var.value is None:
                var.shape = merge_shape(var.shape, shape, other[name][0] if other else None,
                                        names, name)
                var.dtype = dtype

    def _trace_shapes(self, env: Dict[str, Optional[torch.Tensor]]
                      ) -> Dict[str, Tuple[Tuple[int, ...], torch.dtype]]:
        """``name -> (shape, dtype)`` of the graph inputs and every output computed."""
        found = {name: (tuple(env[name].shape), env[name].dtype) for name in self.graph.inputs
                 if env.get(name) is not None}

        def record(op: Operation, op_inputs: Tensors, outputs: List[torch.Tensor]) -> None:
            for var, value in zip(op.outputs, outputs):
                if value is not None:
                    found[var.name] = (tuple(value.shape), value.dtype)
        handle = self.register_forward_hook(record)
        try:
            self._run(env, self._names(None))
        finally:
            handle.remove()
        return found

    # Hooks.

    def register_forward_pre_hook(self, hook: PreHook) -> RemovableHandle:
        """Call ``hook(op, inputs)`` before every operation; see :data:`PreHook`.

        Returns:
            A handle whose ``remove()`` unregisters the hook.
        """
        handle = RemovableHandle(self._pre_hooks)
        self._pre_hooks[handle.id] = hook
        return handle

    def register_forward_hook(self, hook: PostHook) -> RemovableHandle:
        """Call ``hook(op, inputs, outputs)`` after every operation; see :data:`PostHook`.

        Returns:
            A handle whose ``remove()`` unregisters the hook.
        """
        handle = RemovableHandle(self._post_hooks)
        self._post_hooks[handle.id] = hook
        return handle

    # Helpers.

    def _run(self, env: Dict[str, Optional[torch.Tensor]],
             output_names: Tuple[str, ...]) -> List[torch.Tensor]:
        pre_hooks, post_hooks = self._pre_hooks.values(), self._post_hooks.values()
        op = None
        try:
            with torch.no_grad():
                for op, input_names, names, release in self._plan(output_names):
                    inputs = [env[name] for name in input_names]
                    for hook in pre_hooks:
                        inputs = _replaced(inputs, hook(op, inputs))
                    outputs = self.run_operation(op, inputs)
                    for hook in post_hooks:
                        outputs = _replaced(outputs, hook(op, inputs, outputs))
                    env.update(zip(names, outputs))
                    for name in release:
                        del env[name]
        except Exception as error:  # keeps its type; the note says where, as torch.fx does
            if op is not None:
                error.add_note(f'{op.type} operation {op.name!r} of graph {self.graph.name!r} '
                               'failed')
            raise
        return [env[name] for name in output_names]

    def _names(self, output_names: Optional[Sequence[str]]) -> Tuple[str, ...]:
        names = tuple(self.graph.outputs if output_names is None else output_names)
        unknown = [name for name in names if name not in self.graph.variables]
        if unknown:
            raise KeyError(f'graph {self.graph.name!r} has no variables named {unknown}')
        return names

    def _plan(self, output_names: Tuple[str, ...]) -> List[_Step]:
        """The steps, each with the tensors to free after it (their last reader)."""
        if output_names not in self._plans:
            last_use = {}
            for index, op in enumerate(self._operations):
                for var in (*op.inputs, *op.outputs):
                    last_use[var.name] = index
            keep = {*output_names, EMPTY_NAME}
            released: List[List[str]] = [[] for _ in self._operations]
            for name, index in last_use.items():
                if name not in keep:
                    released[index].append(name)
            self._plans[output_names] = [
                (op, tuple(var.name for var in op.inputs), tuple(var.name for var in op.outputs),
                 tuple(released[index])) for index, op in enumerate(self._operations)]
        return self._plans[output_names]

    def _feed(self, inputs: GraphInputs) -> Dict[str, Optional[torch.Tensor]]:
        names = list(self.graph.inputs)
        if isinstance(inputs, torch.Tensor):
            inputs = [inputs]
        if not isinstance(inputs, Mapping):
            # as onnxruntime: inputs that hold a default (initializers listed among the
            # graph inputs, as keep_initializers_as_inputs=True exports write them) may be
            # left out at the end
            if len(inputs) > len(names) or any(self.graph.inputs[name].value is None
                                               for name in names[len(inputs):]):
                defaults = [name for name in names if self.graph.inputs[name].value is not None]
                raise ValueError(f'graph {self.graph.name!r} has {len(names)} inputs {names}; '
                                 f'got {len(inputs)} tensors'
                                 + (f' (the inputs {defaults} have default values and may be '
                                    'left out, after the others)' if defaults else ''))
            inputs = dict(zip(names, inputs))
        env: Dict[str, Optional[torch.Tensor]] = {var.name: var.value
                                                  for var in self._constants}
        env[EMPTY_NAME] = None
        missing = [name for name in names if name not in inputs and name not in env]
        if missing:
            raise ValueError(f'graph {self.graph.name!r}: no tensor given for inputs {missing}')
        for name, value in inputs.items():
            if name not in self.graph.inputs:
                raise KeyError(f'graph {self.graph.name!r} has no input named {name!r}; its '
                               f'inputs are {names}')
            tensor = torch.as_tensor(value)
            check_input_shape(self.graph.name, self.graph.inputs[name], tensor)
            tensor = check_input_dtype(self.graph.name, self.graph.inputs[name], tensor)
            env[name] = tensor.to(self.device)
        return env


def _replaced(tensors: List, replacement: Optional[Sequence]) -> List:
    return tensors if replacement is None else list(replacement)
