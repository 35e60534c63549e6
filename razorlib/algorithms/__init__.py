"""NAS and pruning algorithms, registered in ``MODELS`` (and their model wrappers)."""
from .autoslim import AutoSlim
from .autoslim_ddp import AutoSlimDDP
from .darts import DARTS
from .distill import SingleTeacherDistill
from .group_fisher import GroupFisherAlgorithm
from .ite_prune import ItePruneAlgorithm
from .pruning_base import PruningAlgorithm
from .qat import QAT, QATExportHook
from .slimming import SlimmingAlgorithm
from .spos import SPOS, SPOSDDP, OneShotSupernet
from .sub_model import sub_model

__all__ = ['AutoSlim', 'AutoSlimDDP', 'DARTS', 'GroupFisherAlgorithm', 'ItePruneAlgorithm',
           'OneShotSupernet', 'PruningAlgorithm', 'QAT', 'QATExportHook', 'SPOS', 'SPOSDDP',
           'SingleTeacherDistill', 'SlimmingAlgorithm', 'sub_model']
