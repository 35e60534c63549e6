"""BaseGraph: the graph IR, with the edits that rewire it, its copy and its check.

Registration, naming and queries come from :class:`~razorlib.ir.graph_store.GraphStore`.
Every edit validates its arguments before it changes anything, so an edit that raises
leaves the graph as it was.  :meth:`BaseGraph.check` verifies the invariants listed in
:mod:`razorlib.ir.graph_check`.
"""
import copy as copy_lib
import heapq
from typing import List, Optional

from .graph_check import GraphCheckError, find_graph_problems
from .graph_store import GraphStore
from .operation import Operation
from .quant_config import copy_operation_configs
from .quantable import QuantableOperation
from .variable import Variable

__all__ = ['BaseGraph']


class BaseGraph(GraphStore):
    """A computation graph: operations (nodes) linked by variables (edges).

    ``operations``, ``variables``, ``inputs`` and ``outputs`` are insertion-ordered dicts
    keyed by name.  Read them freely; change them through the methods, which keep the
    links between operations and variables in agreement (see :class:`GraphStore`).

    Args:
        name: the graph's name, used in error messages and by exporters.

    Example:
        >>> graph = BaseGraph('tiny')
        >>> x = graph.create_variable('x', shape=(1, 4))
        >>> graph.mark_variable_as_graph_input(x)
        >>> relu = graph.create_operation('Relu', inputs=[x], outputs=[graph.create_variable()])
        >>> graph.mark_variable_as_graph_output(relu.outputs[0])
        >>> sigmoid = graph.create_operation('Sigmoid')
        >>> graph.insert_op_after(sigmoid, relu).name
        'var_1'
        >>> [op.type for op in graph.topological_sort()], list(graph.outputs)
        (['Relu', 'Sigmoid'], ['var_0'])
        >>> graph.outputs['var_0'].source_op is sigmoid
        True
    """

    def topological_sort(self) -> List[Operation]:
        """Operations ordered so that each comes after its producers; ties keep graph order.

        Raises:
            ValueError: a cycle; the message names the operations on or behind it.
        """
        ops = list(self.operations.values())
        position = {op: index for index, op in enumerate(ops)}
        waiting = {op: len(self.get_upstream_operations(op)) for op in ops}
        ready = [position[op] for op in ops if waiting[op] == 0]
        ordered: List[Operation] = []
        while ready:
            op = ops[heapq.heappop(ready)]
            ordered.append(op)
            for dest in self.get_downstream_operations(op):
                waiting[dest] -= 1
                if waiting[dest] == 0:
                    heapq.heappush(ready, position[dest])
        if len(ordered) < len(ops):
            stuck = [op.name for op in ops if waiting[op] > 0]
            raise ValueError(f'graph {self.name!r} has a cycle: operations {stuck} wait on '
                             'each other; break it with remove_operation or remove_variable')
        return ordered

    # Edits.

    def insert_op_before(self, op: Operation, before: Operation,
                         input_idx: int = 0) -> Variable:
        """Place the unlinked ``op`` on ``before``'s input edge number ``input_idx``.

        ``op`` reads the variable ``before`` read there; ``before`` reads ``op``'s new output.

        Args:
            op: an operation with no inputs or outputs, in the graph or not yet.
            before: an operation of the graph.
            input_idx: which input of ``before`` to cut.

        Returns:
            The new variable between ``op`` and ``before``.
        """
        self._check_insertable(op, before, input_idx, before.inputs, 'input')
        original = before.inputs[input_idx]
        between = Variable(self._fresh_name('var', self.variables))
        self._adopt(op)
        self.variables[between.name] = between
        original.dest_ops.remove(before)
        self._link(original, op)
        self._link(op, between)
        before.inputs[input_idx] = between
        between.dest_ops.append(before)
        return between

    def insert_op_after(self, op: Operation, after: Operation, output_idx: int = 0) -> Variable:
        """Place the unlinked ``op`` on ``after``'s output edge number ``output_idx``.

        ``op`` writes the variable ``after`` wrote there (so its consumers and a graph
        output keep their name); ``after`` writes a new variable that ``op`` reads.

        Args:
            op: an operation with no inputs or outputs, in the graph or not yet.
            after: an operation of the graph.
            output_idx: which output of ``after`` to cut.

        Returns:
            The new variable between ``after`` and ``op``.
        """
        self._check_insertable(op, after, output_idx, after.outputs, 'output')
        original = after.outputs[output_idx]
        between = Variable(self._fresh_name('var', self.variables))
        self._adopt(op)
        self.variables[between.name] = between
        after.outputs[output_idx] = between
        between.source_op = after
        self._link(between, op)
        self._link(op, original)
        return between

    def remove_operation(self, op: Operation, keep_coherence: bool = False) -> None:
        """Remove an operation and its parameters that nothing else uses.

        Its other variables stay.  With ``keep_coherence`` the operation must read one
        non-parameter variable and write one; its consumers then read its input instead,
        which also takes its place among the graph outputs, and its output is removed.
        An operation whose input and output are both graph outputs (``y = Identity(r)``
        with outputs ``r, y``) is refused: ``outputs`` holds a variable once, so the graph
        would silently return one tensor fewer.

        Args:
            op: an operation of the graph.
            keep_coherence: reconnect the input to the consumers (see above).

        Raises:
            ValueError: ``op`` is not in the graph, or cannot be bypassed: it is not
                one-in, one-out, or its input and output are both graph outputs.
        """
        self._require_operation(op)
        if keep_coherence:
            data = [var for var in op.inputs if not var.is_parameter]
            if len(data) != 1 or op.num_of_output != 1 or op.outputs[0] in op.inputs:
                raise ValueError(
                    f'operation {op.name!r} reads {len(data)} non-parameter variable(s) and '
                    f'writes {op.num_of_output}: only a one-in, one-out operation off a cycle '
                    'can be removed with keep_coherence=True')
            bypass = (data[0], op.outputs[0])
            if all(var.name in self.outputs for var in bypass):
                raise ValueError(
                    f'operation {op.name!r} cannot be removed with keep_coherence=True: its '
                    f'input {bypass[0].name!r} and output {bypass[1].name!r} are both graph '
                    'outputs, and the graph would return one tensor fewer; keep the operation')
        parameters = op.parameters
        self._unlink(op)
        del self.operations[op.name]
        for var in self._unique(parameters):
            if not var.dest_ops and var.name not in self.inputs and var.name not in self.outputs:
                self.remove_variable(var)
        if keep_coherence:
            self.create_link_with_var(*bypass)

    def remove_variable(self, var: Variable) -> None:
        """Remove a variable, dropping it from its operations' inputs/outputs and the graph's.

        The operations that read it lose an input, which shifts the later input indices.
        """
        self._require_variable(var)
        if var.source_op is not None:
            var.source_op.outputs.remove(var)
        for op in self._unique(var.dest_ops):
            op.inputs[:] = [read for read in op.inputs if read is not var]
        var.source_op, var.dest_ops = None, []
        del self.variables[var.name]
        self.inputs.pop(var.name, None)
        self.outputs.pop(var.name, None)

    def create_link_with_op(self, producer: Operation, consumer: Operation,
                            variable: Optional[Variable] = None) -> Variable:
        """Make ``consumer`` read (as its next input) a variable ``producer`` writes.

        Args:
            producer: an operation of the graph.
            consumer: an operation of the graph.
            variable: a variable of the graph that ``producer`` writes, or that nothing
                produces yet (it becomes ``producer``'s next output); created when None.

        Returns:
            The linking variable.
        """
        self._require_operation(producer)
        self._require_operation(consumer)
        if variable is None:
            variable = Variable(self._fresh_name('var', self.variables))
            self.variables[variable.name] = variable
        else:
            self._require_variable(variable)
            if variable.source_op not in (None, producer):
                raise ValueError(f'variable {variable.name!r} is produced by operation '
                                 f'{variable.source_op.name!r}, not {producer.name!r}')
            if variable.source_op is None and variable.name in self.inputs:
                raise ValueError(f'variable {variable.name!r} is a graph input: no operation '
                                 'may produce it')
        if variable.source_op is None:
            self._link(producer, variable)
        self._link(variable, consumer)
        return variable

    def create_link_with_var(self, upstream: Variable, downstream: Variable) -> Variable:
        """Merge ``downstream`` into ``upstream``: its consumers read ``upstream`` instead.

        ``upstream`` takes ``downstream``'s place among the graph outputs (where
        ``upstream`` is a graph output already, that place goes: the graph returns one
        tensor fewer); ``downstream`` is removed (and so leaves the graph inputs).

        Args:
            upstream: a variable of the graph.
            downstream: another variable of the graph, which nothing produces.

        Returns:
            ``upstream``.
        """
        self._require_variable(upstream)
        self._require_variable(downstream)
        if upstream is downstream:
            raise ValueError(f'cannot merge variable {upstream.name!r} into itself')
        if downstream.source_op is not None:
            raise ValueError(f'variable {downstream.name!r} is produced by operation '
                             f'{downstream.source_op.name!r}; remove that operation or '
                             'relink its output before merging the variable away')
        for op in downstream.dest_ops:
            op.inputs[op.inputs.index(downstream)] = upstream
            upstream.dest_ops.append(op)
        downstream.dest_ops = []
        if downstream.name in self.outputs:
            self._replace_entry(self.outputs, downstream, upstream)
        self.remove_variable(downstream)
        return upstream

    def replace_input(self, op: Operation, input_idx: int, variable: Variable) -> Variable:
        """Make ``op`` read ``variable`` as its input number ``input_idx``.

        The variable read there before keeps its other consumers and stays in the graph.

        Args:
            op: an operation of the graph.
            input_idx: which input of ``op`` to replace.
            variable: a variable of the graph.

        Returns:
            The variable read there before.

        Example:
            >>> import torch
            >>> graph = BaseGraph()
            >>> w = graph.create_variable('w', torch.ones(2), is_parameter=True)
            >>> a = graph.create_operation('Mul', 'a', inputs=[graph.create_variable('x'), w])
            >>> b = graph.create_operation('Mul', 'b', inputs=[graph.create_variable('y'), w])
            >>> copy = graph.create_variable('w_copy', w.value.clone(), is_parameter=True)
            >>> graph.replace_input(b, 1, copy).name, [op.name for op in w.dest_ops]
            ('w', ['a'])
        """
        self._require_operation(op)
        self._require_variable(variable)
        if not 0 <= input_idx < len(op.inputs):
            raise ValueError(f'operation {op.name!r} has {len(op.inputs)} inputs; input index '
                             f'{input_idx} is out of range')
        previous = op.inputs[input_idx]
        previous.dest_ops.remove(op)
        op.inputs[input_idx] = variable
        variable.dest_ops.append(op)
        return previous

    # Whole graph.

    def copy(self, copy_value: bool = False) -> 'BaseGraph':
        """A copy with its own operations, variables and quantization configs.

        Args:
            copy_value: clone parameter and constant tensors (a deep copy); by default the
                copy shares them with this graph (a shallow copy).  Quantization configs
                are cloned either way, their ``dominated_by``/``master_by`` links among
                the clones.

        Returns:
            The new graph; it generates the names this graph would generate next.
        """
        clone = BaseGraph(self.name)
        clone._name_counters = dict(self._name_counters)
        clone.extension_attrib = copy_lib.deepcopy(self.extension_attrib)
        quantables = [op for op in self.operations.values() if isinstance(op, QuantableOperation)]
        configs = dict(zip(quantables, copy_operation_configs([op.config for op in quantables])))
        variables = {name: var.copy(copy_value) for name, var in self.variables.items()}
        operations = {name: op.copy(configs[op], copy_value) if op in configs else op.copy()
                      for name, op in self.operations.items()}
        for name, op in self.operations.items():
            operations[name].inputs = [variables[var.name] for var in op.inputs]
            operations[name].outputs = [variables[var.name] for var in op.outputs]
        for name, var in self.variables.items():
            if var.source_op is not None:
                variables[name].source_op = operations[var.source_op.name]
            variables[name].dest_ops = [operations[op.name] for op in var.dest_ops]
        clone.operations, clone.variables = operations, variables
        clone.inputs = {name: variables[name] for name in self.inputs}
        clone.outputs = {name: variables[name] for name in self.outputs}
        return clone

    def check(self) -> None:
        """Verify every invariant of the graph.

        Raises:
            GraphCheckError: lists every broken invariant.
        """
        problems = find_graph_problems(self)
        if problems:
            raise GraphCheckError(self.name, problems)

    def __repr__(self) -> str:
        return (f'BaseGraph(name={self.name!r}, {len(self.operations)} operations, '
                f'{len(self.variables)} variables, inputs={list(self.inputs)}, '
                f'outputs={list(self.outputs)})')

    # Helpers.

    def _check_insertable(self, op: Operation, anchor: Operation, index: int,
                          edges: List[Variable], side: str) -> None:
        self._require_operation(anchor)
        if op is anchor or op.inputs or op.outputs:
            raise ValueError(f'operation {op.name!r} must be unlinked (no inputs or outputs) '
                             f'and differ from {anchor.name!r} to be inserted')
        if self.operations.get(op.name) not in (None, op):
            self._check_new_name(op.name, self.operations, 'operation')
        if not 0 <= index < len(edges):
            raise ValueError(f'operation {anchor.name!r} has {len(edges)} {side}s; '
                             f'{side} index {index} is out of range')

    def _adopt(self, op: Operation) -> None:
        self.operations.setdefault(op.name, op)
