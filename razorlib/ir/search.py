"""SearchableGraph: find paths, operation sets and tree patterns in a graph.

An *operation expression* (:data:`OpExpr`) selects operations: an op type (``'Conv'``), a
collection of op types (``{'Add', 'Sub'}``), a predicate ``op -> bool``, or None for any
operation.  Every search visits start and root operations in topological order and
neighbours in tensor order, so its results come in the same order on every run.  Each
search counts its *candidates* (partial paths or partial matches it builds) and raises a
``ValueError`` naming the pattern when they pass ``max_candidates``: broad expressions on a
branching graph can otherwise take exponential time.
"""
from typing import (Callable, Collection, Dict, Iterator, List, Optional, Sequence, Set,
                    Tuple, Union)

from .graph import BaseGraph
from .operation import Operation

__all__ = ['MAX_CANDIDATES', 'OpExpr', 'SearchableGraph', 'describe_expr', 'op_predicate']

OpExpr = Union[None, str, Collection[str], Callable[[Operation], bool]]
"""Selects operations: an op type, a collection of op types, a predicate, or None (any)."""

MAX_CANDIDATES = 100_000
"""The default bound on the candidates one search may build."""

_DIRECTIONS = {'down': BaseGraph.get_downstream_operations,
               'up': BaseGraph.get_upstream_operations}


def op_predicate(expr: OpExpr) -> Callable[[Operation], bool]:
    """The predicate an operation expression stands for.

    Args:
        expr: an op type, a collection of op types, a predicate, or None (any operation).

    Returns:
        A function ``op -> bool``.

    Example:
        >>> from razorlib.ir import Operation
        >>> conv, relu = Operation('c', 'Conv'), Operation('r', 'Relu')
        >>> [op_predicate(expr)(conv) for expr in ('Conv', {'Relu', 'Clip'}, None)]
        [True, False, True]
    """
    if expr is None:
        return lambda op: True
    if isinstance(expr, str):
        return lambda op: op.type == expr
    if callable(expr):
        return expr
    types = frozenset(expr)
    if not all(isinstance(op_type, str) for op_type in types):
        raise TypeError(f'an operation expression is an op type, a collection of op types, '
                        f'a predicate or None; got {expr!r}')
    return lambda op: op.type in types


def describe_expr(expr: OpExpr) -> str:
    """A short text for an operation expression, as error messages show it.

    Example:
        >>> [describe_expr(expr) for expr in ('Conv', {'Sub', 'Add'}, None)]
        ['Conv', '{Add|Sub}', '*']
    """
    if expr is None:
        return '*'
    if isinstance(expr, str):
        return expr
    if callable(expr):
        return getattr(expr, '__name__', repr(expr))
    return '{' + '|'.join(sorted(expr)) + '}'


class _Budget:
    """Counts candidates and refuses to go past the bound."""

    def __init__(self, limit: int, pattern: str, graph: BaseGraph) -> None:
        self.limit, self.pattern, self.graph, self.used = limit, pattern, graph, 0

    def spend(self) -> None:
        self.used += 1
        if self.used > self.limit:
            raise ValueError(f'pattern {self.pattern} built more than {self.limit} candidates '
                             f'in graph {self.graph.name!r}; narrow its expressions or raise '
                             'max_candidates')


class SearchableGraph:
    """Searches over a graph: paths, the operations on them, and tree patterns.

    The searches read the graph as it is when called; they never change it.

    Args:
        graph: the graph to search; it must be free of cycles.
        max_candidates: the most candidates one search may build before it raises.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> for index, op_type in enumerate(['Conv', 'Relu', 'Conv', 'Add']):
        ...     op = graph.create_operation(op_type, f'{op_type.lower()}{index}', inputs=[x],
        ...                                 outputs=[graph.create_variable()])
        ...     x = op.outputs[0]
        >>> search = SearchableGraph(graph)
        >>> [[op.name for op in path] for path in search.path_matching('Conv', 'Relu', 'Conv')]
        [['conv0', 'relu1', 'conv2']]
        >>> [[op.name for op in match] for match in search.pattern_matching(['Conv', 'Add'],
        ...                                                                [(0, 1)])]
        [['conv2', 'add3']]
    """

    def __init__(self, graph: BaseGraph, max_candidates: int = MAX_CANDIDATES) -> None:
        self.graph = graph
        self.max_candidates = max_candidates

    def path_matching(self, sp_expr: OpExpr, rp_expr: OpExpr, ep_expr: OpExpr,
                      direction: str = 'down') -> List[List[Operation]]:
        """Every path from a start operation through relay operations to an end operation.

        A path follows tensors downstream (``'down'``) or upstream (``'up'``) from an
        operation matching ``sp_expr``; each operation after it either matches
        ``ep_expr``, which ends the path, or matches ``rp_expr`` and the path goes on.
        End is tested before relay, so a path ends at the first end operation it reaches.

        Args:
            sp_expr: selects the start operations.
            rp_expr: selects the operations a path may pass through.
            ep_expr: selects the end operations.
            direction: ``'down'`` (producers to consumers) or ``'up'``.

        Returns:
            The paths, each a list ``[start, relays..., end]`` of two or more operations,
            ordered by the start's topological position, then depth first.

        Raises:
            ValueError: an unknown direction, a cycle in the graph, or more candidates
                than ``max_candidates``.
        """
        if direction not in _DIRECTIONS:
            raise ValueError(f'direction must be one of {sorted(_DIRECTIONS)}, got '
                             f'{direction!r}')
        step = _DIRECTIONS[direction]
        start, relay, end = op_predicate(sp_expr), op_predicate(rp_expr), op_predicate(ep_expr)
        budget = self._budget(f'{describe_expr(sp_expr)} -> {describe_expr(rp_expr)}* -> '
                              f'{describe_expr(ep_expr)} ({direction})')
        paths: List[List[Operation]] = []
        for origin in self.graph.topological_sort():
            if not start(origin):
                continue
            budget.spend()
            path, pending = [origin], [iter(step(self.graph, origin))]
            while pending:
                op = next(pending[-1], None)
                if op is None:
                    pending.pop()
                    path.pop()
                elif end(op):
                    budget.spend()
                    paths.append(path + [op])
                elif relay(op):
                    budget.spend()
                    path.append(op)
                    pending.append(iter(step(self.graph, op)))
        return paths

    def opset_matching(self, sp_expr: OpExpr, rp_expr: OpExpr, ep_expr: OpExpr,
                       direction: str = 'down') -> List[Operation]:
        """The distinct operations on the paths of :meth:`path_matching`.

        Args:
            sp_expr: selects the start operations.
            rp_expr: selects the operations a path may pass through.
            ep_expr: selects the end operations.
            direction: ``'down'`` or ``'up'``.

        Returns:
            The operations, in topological order.
        """
        on_paths = {op for path in self.path_matching(sp_expr, rp_expr, ep_expr, direction)
                    for op in path}
        return [op for op in self.graph.topological_sort() if op in on_paths]

    def pattern_matching(self, patterns: Sequence[OpExpr], edges: Sequence[Tuple[int, int]],
                         exclusive: bool = True,
                         name: Optional[str] = None) -> List[List[Operation]]:
        """Every match of a tree pattern.

        Pattern node ``i`` selects operations with ``patterns[i]``; an edge ``(i, j)``
        says that node ``i``'s operation feeds node ``j``'s (``j`` reads an output of
        ``i``).  The edges form a tree rooted at node 0.  A match gives each node its own
        operation.  In exclusive mode data enters a match only at the root and leaves it
        only at the leaves: every operation but the root reads only operations of the
        match (or constants and graph inputs), and every operation but the leaves is read
        only by operations of the match and writes no graph output.

        Args:
            patterns: one operation expression per pattern node.
            edges: ``(parent, child)`` pairs of the tree.
            exclusive: keep only exclusive matches (see above).
            name: the pattern's name in error messages; built from the expressions when None.

        Returns:
            The matches, each a list of operations in pattern node order; ordered by the
            root's topological position, then by the neighbours' tensor order.  Matches may
            share operations (a chain pattern slides along a longer chain).

        Raises:
            ValueError: the edges do not form a tree rooted at node 0, the graph has a
                cycle, or the search builds more than ``max_candidates`` candidates.
        """
        parents, order = _tree(len(patterns), edges)
        predicates = [op_predicate(expr) for expr in patterns]
        budget = self._budget(name if name is not None else
                              f'{[describe_expr(expr) for expr in patterns]} with edges '
                              f'{list(edges)}')
        leaves = set(range(len(patterns))) - set(parents.values())
        matches: List[List[Operation]] = []
        for root in self.graph.topological_sort():
            if not predicates[0](root):
                continue
            budget.spend()
            for match in self._extend({0: root}, order, parents, predicates, budget):
                if not exclusive or self._is_exclusive(match, leaves):
                    matches.append(match)
        return matches

    # Helpers.

    def _budget(self, pattern: str) -> _Budget:
        return _Budget(self.max_candidates, pattern, self.graph)

    def _extend(self, assigned: Dict[int, Operation], order: List[int], parents: Dict[int, int],
                predicates: List[Callable[[Operation], bool]],
                budget: _Budget) -> Iterator[List[Operation]]:
        """Complete a partial match node by node, in the tree's preorder."""
        if len(assigned) == len(order):
            yield [assigned[node] for node in range(len(order))]
            return
        node = order[len(assigned)]
        used = set(assigned.values())
        for op in self.graph.get_downstream_operations(assigned[parents[node]]):
            if op in used or not predicates[node](op):
                continue
            budget.spend()
            assigned[node] = op
            yield from self._extend(assigned, order, parents, predicates, budget)
            del assigned[node]

    def _is_exclusive(self, match: List[Operation], leaves: Set[int]) -> bool:
        members = set(match)
        for node, op in enumerate(match):
            if node != 0 and any(up not in members
                                 for up in self.graph.get_upstream_operations(op)):
                return False
            if node not in leaves and (
                    any(down not in members
                        for down in self.graph.get_downstream_operations(op))
                    or any(var.name in self.graph.outputs for var in op.outputs)):
                return False
        return True


def _tree(size: int, edges: Sequence[Tuple[int, int]]) -> Tuple[Dict[int, int], List[int]]:
    """The parent of each node and the nodes in preorder; refuses anything but a tree."""
    if size == 0:
        raise ValueError('a pattern needs at least one node')
    parents: Dict[int, int] = {}
    children: Dict[int, List[int]] = {node: [] for node in range(size)}
    for parent, child in edges:
        if not (0 <= parent < size and 0 <= child < size):
            raise ValueError(f'edge {(parent, child)} names a node outside the pattern\'s '
                             f'{size} nodes')
        if child == 0 or child in parents:
            raise ValueError(f'edge {(parent, child)}: node {child} would have two parents '
                             'or be fed the root; the edges must form a tree rooted at node 0')
        parents[child] = parent
        children[parent].append(child)
    order, stack = [], [0]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(children[node]))
    if len(order) != size:
        unreached = sorted(set(range(size)) - set(order))
        raise ValueError(f'pattern nodes {unreached} are not reached from node 0; the edges '
                         'must form a tree rooted at node 0')
    return parents, order
