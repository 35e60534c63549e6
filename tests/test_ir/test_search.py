"""SearchableGraph: paths, operation sets and tree patterns, exclusive or not, and the bound."""
import pytest

from razorlib.ir import BaseGraph, SearchableGraph
from razorlib.ir.search import describe_expr, op_predicate


def build(edges, types, outputs=()):
    """Operations named by ``types`` (name -> type); ``edges`` lists (producer, consumer).

    Each operation writes one variable, named after it; consumers read in edge order.
    Operations without a producer read the graph input ``x``.
    """
    graph = BaseGraph('g')
    x = graph.create_variable('x')
    graph.mark_variable_as_graph_input(x)
    produced = {name: graph.create_variable(f'{name}.out') for name in types}
    readers = {consumer for _, consumer in edges}
    for name, op_type in types.items():
        inputs = [produced[src] for src, dst in edges if dst == name]
        graph.create_operation(op_type, name, inputs=inputs if name in readers else [x],
                               outputs=[produced[name]])
    for name in outputs:
        graph.mark_variable_as_graph_output(produced[name])
    return graph


def names(found):
    return [[op.name for op in item] for item in found]


# a -> b -> d, a -> c -> d: a diamond; d -> e.
DIAMOND = dict(edges=[('a', 'b'), ('a', 'c'), ('b', 'd'), ('c', 'd'), ('d', 'e')],
               types=dict(a='Conv', b='Relu', c='Sigmoid', d='Add', e='Relu'))


@pytest.fixture
def diamond():
    return build(**DIAMOND, outputs=['e'])


def test_expressions_are_types_type_sets_predicates_or_none():
    graph = build([], dict(a='Conv'))
    conv = graph.operations['a']
    assert op_predicate('Conv')(conv) and not op_predicate('Relu')(conv)
    assert op_predicate(['Relu', 'Conv'])(conv) and op_predicate(None)(conv)
    assert op_predicate(lambda op: op.name == 'a')(conv)
    with pytest.raises(TypeError, match='operation expression'):
        op_predicate([1, 2])
    assert describe_expr(frozenset({'Relu', 'Clip'})) == '{Clip|Relu}'


def test_path_matching_finds_every_path_in_order(diamond):
    search = SearchableGraph(diamond)
    assert names(search.path_matching('Conv', None, 'Add')) == [['a', 'b', 'd'], ['a', 'c', 'd']]
    assert names(search.path_matching('Conv', 'Relu', 'Add')) == [['a', 'b', 'd']]
    assert names(search.path_matching('Relu', None, 'Relu')) == [['b', 'd', 'e']]


def test_path_matching_upwards_and_the_first_end_ends_a_path(diamond):
    search = SearchableGraph(diamond)
    assert names(search.path_matching('Relu', None, 'Conv', direction='up')) == [
        ['b', 'a'], ['e', 'd', 'b', 'a'], ['e', 'd', 'c', 'a']]
    # 'b' is an end as well as a relay: paths through it stop there.
    assert names(search.path_matching('Conv', None, {'Relu', 'Add'})) == [['a', 'b'],
                                                                          ['a', 'c', 'd']]
    with pytest.raises(ValueError, match="direction must be one of"):
        search.path_matching('Conv', None, 'Add', direction='sideways')


def test_opset_matching_returns_the_distinct_operations_in_topological_order(diamond):
    search = SearchableGraph(diamond)
    assert [op.name for op in search.opset_matching('Conv', None, 'Relu')] == \
        ['a', 'b', 'c', 'd', 'e']
    assert [op.name for op in search.opset_matching('Relu', 'Add', 'Relu')] == ['b', 'd', 'e']
    assert search.opset_matching('Sigmoid', 'Add', 'Conv') == []


def test_exclusive_pattern_rejects_a_chain_through_the_diamond(diamond):
    search = SearchableGraph(diamond)
    chain = (['Conv', 'Relu', 'Add'], [(0, 1), (1, 2)])
    assert names(search.pattern_matching(*chain, exclusive=False)) == [['a', 'b', 'd']]
    # 'a' also feeds 'c', and 'd' also reads 'c': data crosses the boundary.
    assert search.pattern_matching(*chain) == []


def test_tree_pattern_with_two_branches_covers_the_diamond(diamond):
    search = SearchableGraph(diamond)
    branches = ['Conv', 'Relu', 'Sigmoid']
    assert names(search.pattern_matching(branches, [(0, 1), (0, 2)])) == [['a', 'b', 'c']]
    # Children may be listed in either order; matches come in pattern node order.
    assert names(search.pattern_matching(['Conv', 'Sigmoid', 'Relu'], [(0, 2), (0, 1)])) == \
        [['a', 'c', 'b']]
    full = ['Conv', 'Relu', 'Sigmoid', 'Add', 'Relu']
    assert names(search.pattern_matching(full, [(0, 1), (0, 2), (1, 3), (3, 4)])) == \
        [['a', 'b', 'c', 'd', 'e']]


def test_exclusive_pattern_refuses_a_graph_output_inside():
    graph = build([('a', 'b')], dict(a='Conv', b='Relu'), outputs=['a', 'b'])
    search = SearchableGraph(graph)
    assert search.pattern_matching(['Conv', 'Relu'], [(0, 1)]) == []
    assert names(search.pattern_matching(['Conv', 'Relu'], [(0, 1)], exclusive=False)) == \
        [['a', 'b']]


def test_matches_come_in_topological_order_and_may_overlap():
    graph = build([('r1', 'r2'), ('r2', 'r3')], dict(r3='Relu', r2='Relu', r1='Relu'))
    assert names(SearchableGraph(graph).pattern_matching(['Relu', 'Relu'], [(0, 1)])) == \
        [['r1', 'r2'], ['r2', 'r3']]


def test_an_operation_is_used_once_per_match():
    graph = build([('a', 'b')], dict(a='Relu', b='Relu'))
    # The pattern's two children cannot both be 'b'.
    assert SearchableGraph(graph).pattern_matching(['Relu', 'Relu', 'Relu'],
                                                   [(0, 1), (0, 2)], exclusive=False) == []


@pytest.mark.parametrize('size, edges, message', [
    (2, [(0, 1), (0, 1)], 'two parents'),
    (2, [(1, 0)], 'two parents or be fed the root'),
    (2, [(0, 3)], 'outside the pattern'),
    (3, [(1, 2), (2, 1)], r'nodes \[1, 2\] are not reached'),
    (2, [], r'nodes \[1\] are not reached'),
    (0, [], 'at least one node'),
])
def test_pattern_edges_must_form_a_tree(diamond, size, edges, message):
    with pytest.raises(ValueError, match=message):
        SearchableGraph(diamond).pattern_matching([None] * size, edges)


def test_candidate_bound_names_the_pattern():
    # A ladder of diamonds: the number of paths doubles with every rung.
    edges, types, last = [], {'s': 'Conv'}, 's'
    for rung in range(12):
        left, right, join = f'l{rung}', f'r{rung}', f'j{rung}'
        types.update({left: 'Relu', right: 'Relu', join: 'Add'})
        edges += [(last, left), (last, right), (left, join), (right, join)]
        last = join
    graph = build(edges, types)
    assert len(SearchableGraph(graph).path_matching('Conv', None, 'Add')) == 2
    with pytest.raises(ValueError, match=r'pattern Conv -> \*\* -> Sigmoid \(down\) built '
                                         r'more than 1000 candidates in graph \'g\''):
        SearchableGraph(graph, max_candidates=1000).path_matching('Conv', None, 'Sigmoid')
    with pytest.raises(ValueError, match='pattern ladder built more than 3 candidates'):
        SearchableGraph(graph, max_candidates=3).pattern_matching(
            ['Relu', 'Add'], [(0, 1)], name='ladder')
    unnamed = r"pattern \['Relu', 'Add'\] with edges \[\(0, 1\)\] built more"
    with pytest.raises(ValueError, match=unnamed):
        SearchableGraph(graph, max_candidates=3).pattern_matching(['Relu', 'Add'], [(0, 1)])


def test_searching_a_cyclic_graph_is_refused():
    graph = build([('a', 'b'), ('b', 'a')], dict(a='Relu', b='Relu'))
    with pytest.raises(ValueError, match='cycle'):
        SearchableGraph(graph).pattern_matching(['Relu'], [])
