"""NAS and pruning algorithms, registered in ``MODELS`` (and their model wrappers)."""
from .autoslim import AutoSlim
from .autoslim_ddp import AutoSlimDDP
from .sub_model import sub_model

__all__ = ['AutoSlim', 'AutoSlimDDP', 'sub_model']
