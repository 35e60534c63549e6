"""GraphPass and PassResult: one rewrite of a graph, in place, checked before and after."""
import abc
from typing import NamedTuple, Union

from ..graph import BaseGraph

__all__ = ['GraphPass', 'PassResult']


class PassResult(NamedTuple):
    """What a pass returns: the graph and whether it changed.

    Args:
        graph: the graph the pass ran on (passes work in place: the same object).
        modified: whether the pass changed anything.
        changes: how many rewrites it made (fusions, copies, links...), for reports and
            tests; ``modified`` is ``changes > 0`` for the passes that count.

    Example:
        >>> result = PassResult(BaseGraph(), modified=False)
        >>> result.modified, result.changes
        (False, 0)
    """
    graph: BaseGraph
    modified: bool
    changes: int = 0

    @classmethod
    def counted(cls, graph: BaseGraph, changes: int) -> 'PassResult':
        """The result of a pass that made ``changes`` rewrites on ``graph``."""
        return cls(graph, changes > 0, changes)


class GraphPass(abc.ABC):
    """One rewrite of a graph, in the style of onnx-ir's passes.

    A pass is configured when it is built (its constructor's arguments, from a config
    dict through :data:`razorlib.registry.GRAPH_PASSES`) and then called on graphs:
    ``pass_(graph)`` checks :meth:`requires`, runs :meth:`call`, which changes the graph in
    place and returns a :class:`PassResult`, then checks :meth:`ensures` (by default
    ``graph.check()``: every invariant of the graph holds).  An error raised by any of the
    three keeps its type and gets a note naming the pass.  A pass's result computes what
    the graph computed before.

    Subclasses implement :meth:`call`, may override :meth:`requires` and :meth:`ensures`,
    and register with ``@GRAPH_PASSES.register_module(name=['ClassName', 'alias'])``.

    Args:
        none here: a subclass's constructor takes the pass's options, which a config dict
        gives by name (``dict(type='LinkPass', quantizer=...)``).

    Example:
        >>> class DropUnusedVariables(GraphPass):
        ...     def call(self, graph):
        ...         unused = [var for var in graph.variables.values()
        ...                   if var.source_op is None and not var.dest_ops
        ...                   and var.name not in graph.inputs and var.name not in graph.outputs]
        ...         for var in unused:
        ...             graph.remove_variable(var)
        ...         return PassResult.counted(graph, len(unused))
        >>> graph = BaseGraph()
        >>> _ = graph.create_variable('loose')
        >>> result = DropUnusedVariables()(graph)
        >>> result.graph is graph, result.modified, result.changes, list(graph.variables)
        (True, True, 1, [])
    """

    def __call__(self, graph: Union[BaseGraph, PassResult]) -> PassResult:
        """Run the pass on ``graph`` (or on the graph of a previous pass's result).

        Raises:
            TypeError: :meth:`call` returned no :class:`PassResult`.
            RuntimeError: :meth:`call` returned another graph than it was given.
        """
        if isinstance(graph, PassResult):
            graph = graph.graph
        with _noted(f'in the requirements of graph pass {self!r}'):
            self.requires(graph)
        with _noted(f'while running graph pass {self!r} on graph {graph.name!r}'):
            result = self.call(graph)
        if not isinstance(result, PassResult):
            raise TypeError(f'graph pass {self!r} returned {type(result).__name__}; call() '
                            'must return a PassResult')
        if result.graph is not graph:
            raise RuntimeError(f'graph pass {self!r} returned another graph; passes change '
                               'the graph they are given, in place, and return it')
        with _noted(f'after graph pass {self!r}: its result breaks what it ensures'):
            self.ensures(graph)
        return result

    @abc.abstractmethod
    def call(self, graph: BaseGraph) -> PassResult:
        """Rewrite ``graph`` in place; return it in a :class:`PassResult`."""

    def requires(self, graph: BaseGraph) -> None:
        """Raise when ``graph`` is not fit for the pass; by default every graph is."""

    def ensures(self, graph: BaseGraph) -> None:
        """Raise when the pass left ``graph`` broken; by default ``graph.check()``."""
        graph.check()

    def __repr__(self) -> str:
        return type(self).__name__


class _noted:
    """Adds ``note`` to an exception raised in the block; the exception keeps its type."""

    def __init__(self, note: str) -> None:
        self.note = note

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, traceback) -> bool:
        if isinstance(error, Exception) and self.note not in getattr(error, '__notes__', ()):
            error.add_note(self.note)
        return False
