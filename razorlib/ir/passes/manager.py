"""PassManager: run a sequence of graph passes, repeated until nothing changes."""
import logging
from typing import Any, List, Sequence

from ...registry import GRAPH_PASSES
from ..components import build_component
from ..graph import BaseGraph
from .base import GraphPass, PassResult

logger = logging.getLogger(__name__)

__all__ = ['PassManager', 'build_pass']


def build_pass(spec: Any) -> GraphPass:
    """A :class:`GraphPass` from a registered name, a ``dict(type=..., **options)`` or a pass.

    Example:
        >>> build_pass('fuse_bn'), build_pass(dict(type='DeleteIsolated'))
        (FuseBatchNorm, DeleteIsolated)
    """
    return build_component(GRAPH_PASSES, spec, base=GraphPass, parameter='graph pass')


class PassManager(GraphPass):
    """Runs ``passes`` in order, ``steps`` times at most; itself a pass.

    A fusion can open the way for another (a MatMul + Add becomes a Gemm, whose bias an
    Add after it then joins), so the sequence may be run again; with ``early_stop`` it
    stops after the first round that changed nothing.  Each pass checks its own
    requirements and guarantees; an error keeps its type and gets notes naming the pass
    and the round.

    Args:
        passes: :class:`GraphPass`\\ es, registered names (``'fuse_bn'``) or config dicts
            (``dict(type='FuseBatchNorm')``), built once here.
        steps: how many rounds at most.
        early_stop: stop after a round in which no pass changed the graph.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x', shape=(2, 3))
        >>> graph.mark_variable_as_graph_input(x)
        >>> w = graph.create_variable('w', torch.randn(3, 4), is_parameter=True)
        >>> mm = graph.create_operation('MatMul', 'mm', inputs=[x, w],
        ...                             outputs=[graph.create_variable('y')])
        >>> b = graph.create_variable('b', torch.zeros(4), is_parameter=True)
        >>> add = graph.create_operation('Add', 'add', inputs=[mm.outputs[0], b],
        ...                              outputs=[graph.create_variable('z')])
        >>> graph.mark_variable_as_graph_output(add.outputs[0])
        >>> manager = PassManager(['fuse_gemm', dict(type='DeleteIsolated')], steps=3)
        >>> result = manager(graph)
        >>> result.modified, result.changes, [op.type for op in graph.operations.values()]
        (True, 1, ['Gemm'])
        >>> manager.rounds  # the second round changed nothing
        2
    """

    def __init__(self, passes: Sequence[Any], steps: int = 1, early_stop: bool = True) -> None:
        if isinstance(passes, (str, dict, GraphPass)):
            passes = [passes]
        if steps < 1:
            raise ValueError(f'PassManager: steps must be at least 1, got {steps}')
        self.passes: List[GraphPass] = [build_pass(spec) for spec in passes]
        self.steps = steps
        self.early_stop = early_stop
        self.rounds = 0
        """How many rounds the last call ran."""

    def call(self, graph: BaseGraph) -> PassResult:
        """Run the rounds; the result counts the changes of every pass in every round."""
        changes, modified = 0, False
        for self.rounds in range(1, self.steps + 1):
            round_modified = False
            for index, graph_pass in enumerate(self.passes):
                try:
                    result = graph_pass(graph)
                except Exception as error:
                    done = ', '.join(map(repr, self.passes[:index])) or 'none'
                    error.add_note(f'in round {self.rounds} of {self!r}; passes run before '
                                   f'it in that round: {done}')
                    raise
                round_modified |= result.modified
                changes += result.changes
            modified |= round_modified
            if not round_modified and self.early_stop:
                break
        logger.debug('%r: %d changes in %d rounds', self, changes, self.rounds)
        return PassResult(graph, modified, changes)

    def ensures(self, graph: BaseGraph) -> None:
        """Nothing more: each pass checked its own result."""

    def __repr__(self) -> str:
        return f'PassManager([{", ".join(map(repr, self.passes))}])'
