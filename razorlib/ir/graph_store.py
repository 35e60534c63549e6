"""GraphStore: the name-keyed containers of a graph and how things enter and leave them.

It holds the operations, variables, graph inputs and graph outputs, generates names,
registers operations and variables with their links, and answers neighbourhood queries.
:class:`~razorlib.ir.graph.BaseGraph` adds the edits that rewire a graph.  Every method
validates its arguments before it changes anything, so a call that raises leaves the graph
as it was.
"""
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import torch

from .operation import DEFAULT_OPSET, UNSPECIFIED_PLATFORM, Operation, Opset
from .variable import Dim, Variable

__all__ = ['GraphStore']


class GraphStore:
    """Operations and variables by name, registered with their links; see ``BaseGraph``.

    ``operations``, ``variables``, ``inputs`` and ``outputs`` are insertion-ordered dicts
    keyed by name.  Read them freely; change them through the methods, which keep the links
    between operations and variables in agreement.  Names are unique per graph; a name left
    out is generated from a per-graph counter (``op_0``, ``var_0``, ...), so building the
    same graph twice gives the same names.

    Args:
        name: the graph's name, used in error messages and by exporters.

    ``extension_attrib`` holds razorlib's own annotations of the whole graph (for
    instance which exporter built it); like an operation's, it is never exported.

    Example:
        >>> store = GraphStore('g')
        >>> x = store.create_variable()
        >>> relu = store.create_operation('Relu', inputs=[x])
        >>> relu.name, x.name, x.dest_ops == [relu]
        ('op_0', 'var_0', True)
    """

    def __init__(self, name: str = 'graph') -> None:
        self.name = name
        self.operations: Dict[str, Operation] = {}
        self.variables: Dict[str, Variable] = {}
        self.inputs: Dict[str, Variable] = {}
        self.outputs: Dict[str, Variable] = {}
        self.extension_attrib: Dict[str, Any] = {}
        self._name_counters = {'op': 0, 'var': 0}

    # Creating and registering.

    def create_operation(self, op_type: str, name: Optional[str] = None,
                         attributes: Optional[Dict[str, Any]] = None,
                         inputs: Optional[Sequence[Variable]] = None,
                         outputs: Optional[Sequence[Variable]] = None,
                         platform: Any = UNSPECIFIED_PLATFORM,
                         opset: Union[int, Opset] = DEFAULT_OPSET) -> Operation:
        """Create an operation, add it and link it to existing variables.

        Args:
            op_type: the ONNX op type.
            name: a name unused by the graph's operations; generated when None.
            attributes: the ONNX attributes.
            inputs: variables of the graph the operation reads, in order.
            outputs: variables of the graph the operation writes; none may have a producer.
            platform: see :class:`~razorlib.ir.operation.Operation`.
            opset: see :class:`~razorlib.ir.operation.Operation`.

        Returns:
            The new operation.
        """
        op = Operation(f'<new {op_type}>' if name is None else name, op_type, attributes,
                       opset, platform)
        op.inputs, op.outputs = list(inputs or ()), list(outputs or ())
        self._check_attachable(op)
        if name is None:
            op.name = self._fresh_name('op', self.operations)
        self.append_operation(op)
        return op

    def create_variable(self, name: Optional[str] = None, value: Optional[torch.Tensor] = None,
                        is_parameter: bool = False,
                        dest_ops: Optional[Sequence[Operation]] = None,
                        source_op: Optional[Operation] = None,
                        shape: Optional[Sequence[Dim]] = None,
                        dtype: Optional[torch.dtype] = None) -> Variable:
        """Create a variable, add it and link it to existing operations.

        Args:
            name: a name unused by the graph's variables; generated when None.
            value: see :class:`~razorlib.ir.variable.Variable`.
            is_parameter: see :class:`~razorlib.ir.variable.Variable`.
            dest_ops: operations of the graph that read the variable as their next input.
            source_op: an operation of the graph that writes it as its next output.
            shape: see :class:`~razorlib.ir.variable.Variable`.
            dtype: see :class:`~razorlib.ir.variable.Variable`.

        Returns:
            The new variable.
        """
        dest_ops = list(dest_ops or ())
        for op in ([source_op] if source_op is not None else []) + dest_ops:
            self._require_operation(op)
        if name is None:
            name = self._fresh_name('var', self.variables)
        var = Variable(name, value, is_parameter, shape, dtype)
        var.source_op, var.dest_ops = source_op, dest_ops
        self.append_variable(var)
        return var

    def append_operation(self, op: Operation) -> None:
        """Add an operation whose ``inputs``/``outputs`` are variables of the graph.

        The variables' ``dest_ops``/``source_op`` are updated to list the operation.

        Args:
            op: the operation; its outputs must have no producer yet.

        Raises:
            ValueError: the name is taken, a variable is not in the graph or is produced
                already, or a variable lists the operation already.
        """
        self._check_new_name(op.name, self.operations, 'operation')
        self._check_attachable(op)
        self.operations[op.name] = op
        self._link_variables_of(op)

    def append_variable(self, var: Variable) -> None:
        """Add a variable whose ``source_op``/``dest_ops`` are operations of the graph.

        The operations' ``outputs``/``inputs`` get the variable appended.

        Args:
            var: the variable.

        Raises:
            ValueError: the name is taken, an operation is not in the graph or lists the
                variable already.
        """
        self._check_new_name(var.name, self.variables, 'variable')
        linked = ([var.source_op] if var.source_op is not None else []) + var.dest_ops
        for op in linked:
            self._require_operation(op)
            if var in op.inputs or var in op.outputs:
                raise ValueError(f'operation {op.name!r} lists variable {var.name!r} already; '
                                 'append an unlinked variable')
        self.variables[var.name] = var
        if var.source_op is not None:
            var.source_op.outputs.append(var)
        for op in var.dest_ops:
            op.inputs.append(var)

    def replace_operation(self, old: Operation, new: Operation) -> None:
        """Put ``new`` where ``old`` is: same position, ``new``'s own inputs and outputs.

        ``old`` leaves the graph unlinked.  Typical use: swap an operation for the
        :class:`~razorlib.ir.quantable.QuantableOperation` built from it.

        Args:
            old: an operation of the graph.
            new: an operation not in the graph, named like ``old`` or with a free name,
                whose inputs and outputs are variables of the graph.
        """
        self._require_operation(old)
        if new.name != old.name:
            self._check_new_name(new.name, self.operations, 'operation')
        self._check_attachable(new, replacing=old)
        self._unlink(old)
        self._replace_entry(self.operations, old, new)
        self._link_variables_of(new)

    # Queries.

    def get_upstream_operations(self, op: Operation) -> List[Operation]:
        """The distinct operations that produce ``op``'s inputs, in input order."""
        self._require_operation(op)
        return self._unique(var.source_op for var in op.inputs if var.source_op is not None)

    def get_downstream_operations(self, op: Operation) -> List[Operation]:
        """The distinct operations that read ``op``'s outputs, in output order."""
        self._require_operation(op)
        return self._unique(dest for var in op.outputs for dest in var.dest_ops)

    # Graph boundary.

    def mark_variable_as_graph_input(self, var: Variable) -> None:
        """Add a variable nothing produces to the graph inputs (a no-op if there already)."""
        self._require_variable(var)
        if var.source_op is not None:
            raise ValueError(f'variable {var.name!r} is produced by operation '
                             f'{var.source_op.name!r}, so it cannot be a graph input')
        self.inputs[var.name] = var

    def mark_variable_as_graph_output(self, var: Variable) -> None:
        """Add a variable to the graph outputs (a no-op if there already)."""
        self._require_variable(var)
        self.outputs[var.name] = var

    # Helpers.

    def _fresh_name(self, prefix: str, taken: Dict[str, Any]) -> str:
        while True:
            name = f'{prefix}_{self._name_counters[prefix]}'
            self._name_counters[prefix] += 1
            if name not in taken:
                return name

    def _check_new_name(self, name: str, taken: Dict[str, Any], kind: str) -> None:
        if name in taken:
            raise ValueError(f'graph {self.name!r} already has a {kind} named {name!r}; '
                             'pick another name, or pass name=None to generate one')

    def _require_operation(self, op: Operation) -> None:
        if self.operations.get(op.name) is not op:
            raise ValueError(f'operation {op.name!r} is not in graph {self.name!r}')

    def _require_variable(self, var: Variable) -> None:
        if self.variables.get(var.name) is not var:
            raise ValueError(f'variable {var.name!r} is not in graph {self.name!r}')

    def _check_attachable(self, op: Operation, replacing: Optional[Operation] = None) -> None:
        """``op``'s variables are graph variables ready to list it as reader or producer."""
        for var in op.inputs + op.outputs:
            self._require_variable(var)
            if op in var.dest_ops or var.source_op is op:
                raise ValueError(f'variable {var.name!r} lists operation {op.name!r} already; '
                                 'attach an operation whose variables do not')
        for var in op.outputs:
            if var.source_op not in (None, replacing):
                raise ValueError(f'variable {var.name!r} is produced by operation '
                                 f'{var.source_op.name!r}; operation {op.name!r} cannot '
                                 'produce it too')
            if var.name in self.inputs:
                raise ValueError(f'variable {var.name!r} is a graph input; operation '
                                 f'{op.name!r} cannot produce it')
            if op.outputs.count(var) > 1:
                raise ValueError(f'operation {op.name!r} lists output {var.name!r} twice')

    def _link_variables_of(self, op: Operation) -> None:
        for var in op.inputs:
            var.dest_ops.append(op)
        for var in op.outputs:
            var.source_op = op

    def _unlink(self, op: Operation) -> None:
        for var in self._unique(op.inputs):
            var.dest_ops[:] = [dest for dest in var.dest_ops if dest is not op]
        for var in op.outputs:
            var.source_op = None
        op.inputs.clear()
        op.outputs.clear()

    @staticmethod
    def _replace_entry(table: Dict[str, Any], old: Any, new: Any) -> None:
        """Put ``new`` under its name where ``old`` was; keep a ``new`` listed earlier."""
        entries = [(new.name, new) if item is old else (key, item) for key, item in table.items()]
        table.clear()
        for key, item in entries:
            table.setdefault(key, item)

    @staticmethod
    def _link(source: Union[Operation, Variable], dest: Union[Operation, Variable]) -> None:
        """Link an operation to a variable it writes, or a variable to an operation reading it."""
        if isinstance(source, Operation):
            source.outputs.append(dest)
            dest.source_op = source
        else:
            source.dest_ops.append(dest)
            dest.inputs.append(source)

    @staticmethod
    def _unique(items: Iterable) -> List:
        return list(dict.fromkeys(items))
