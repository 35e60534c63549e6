"""Search and subnet-validation loops for mmengine's Runner (registered in ``LOOPS``)."""
from .base_search_loop import BaseSearchLoop
from .bn_calibration import recalibrate_bn
from .evolution_search_loop import EvolutionSearchLoop
from .greedy_search_loop import GreedySearchLoop
from .results import SearchResult, SubnetRecord, nearest, pareto_front
from .search_state import SearchState
from .subnet_val_loop import SubnetValLoop
from .width_space import SearchSpace, WidthSpace

__all__ = [
    'BaseSearchLoop', 'EvolutionSearchLoop', 'GreedySearchLoop', 'SearchResult', 'SearchSpace',
    'SearchState',
    'SubnetRecord', 'SubnetValLoop', 'WidthSpace', 'nearest', 'pareto_front', 'recalibrate_bn'
]
