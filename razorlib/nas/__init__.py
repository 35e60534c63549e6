"""One-shot NAS: mutables, the search-space object, searchable backbones, fixed subnets.

mutables (``OneShotMutableOP``, ``DiffMutableOP``, ``OneShotMutableValue``,
``OneShotMutableChannel``) ->
:class:`NasMutator` (sample / set / export / check a choice dict) ->
:class:`FixedSubnet` (the YAML) -> :func:`fix_subnet` (a plain ``nn.Module``).
The algorithms that train supernets (SPOS, DARTS) are in ``razorlib.algorithms``.
"""
from .fix_subnet import (fix_subnet, load_fix_subnet, nas_subnet, reinitialise,
                         remaining_mutables)
from .mutables import (Choice, DiffMutableOP, MutableChoice, OneShotMutableChannel,
                       OneShotMutableOP, OneShotMutableValue)
from .mutator import Condition, NasMutator
from .ops import (DynamicMBConv, DynamicShuffleBlock, DynamicStage, MBConvBlock, ShuffleBlock,
                  ShuffleXception)
from .optim import ArchWeightOptimWrapperConstructor
from .search_spaces import SearchableMobileNet, SearchableShuffleNetV2
from .subnet import FixedSubnet

__all__ = [
    'ArchWeightOptimWrapperConstructor', 'Choice', 'Condition', 'DiffMutableOP',
    'DynamicMBConv', 'DynamicShuffleBlock', 'DynamicStage', 'FixedSubnet', 'MBConvBlock',
    'MutableChoice', 'NasMutator', 'OneShotMutableChannel', 'OneShotMutableOP',
    'OneShotMutableValue',
    'SearchableMobileNet', 'SearchableShuffleNetV2', 'ShuffleBlock', 'ShuffleXception',
    'fix_subnet', 'load_fix_subnet', 'nas_subnet', 'reinitialise', 'remaining_mutables'
]
