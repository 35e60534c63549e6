"""Registries of razorlib: children of mmengine's root registries, scope ``razorlib``.

Being children of mmengine's roots is what lets another OpenMMLab project reach our
components as ``type='razorlib.AutoSlim'`` once ``custom_imports`` imported razorlib, and
lets our configs use mmengine's own components (optimizers, hooks, loops) unqualified.
``locations`` makes lazy import work: building from a registry imports the package that
registers into it.

Example:
    >>> from razorlib.registry import PRUNERS
    >>> pruner = PRUNERS.build(dict(type='L1NormPruner', ratio=0.5))
    >>> type(pruner).__name__
    'L1NormPruner'
"""
from importlib.util import find_spec
from typing import List

from mmengine.registry import DATA_SAMPLERS as MMENGINE_DATA_SAMPLERS
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import EVALUATOR as MMENGINE_EVALUATOR
from mmengine.registry import FUNCTIONS as MMENGINE_FUNCTIONS
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import LOOPS as MMENGINE_LOOPS
from mmengine.registry import METRICS as MMENGINE_METRICS
from mmengine.registry import MODEL_WRAPPERS as MMENGINE_MODEL_WRAPPERS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import OPTIMIZERS as MMENGINE_OPTIMIZERS
from mmengine.registry import PARAM_SCHEDULERS as MMENGINE_PARAM_SCHEDULERS
from mmengine.registry import TASK_UTILS as MMENGINE_TASK_UTILS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import VISBACKENDS as MMENGINE_VISBACKENDS
from mmengine.registry import VISUALIZERS as MMENGINE_VISUALIZERS
from mmengine.registry import DefaultScope, Registry

SCOPE = 'razorlib'


def _present(*packages: str) -> List[str]:
    """The ``packages`` that exist in this checkout.

    mmengine imports every location before it looks a type up and fails on the first
    one missing, so naming a planned package (``razorlib.algorithms``) before it lands
    would break every build from that registry.
    """
    return [package for package in packages if find_spec(package) is not None]


MODELS = Registry('model', parent=MMENGINE_MODELS, scope=SCOPE,
                  locations=_present('razorlib.models', 'razorlib.algorithms'))
MODEL_WRAPPERS = Registry('model_wrapper', parent=MMENGINE_MODEL_WRAPPERS, scope=SCOPE,
                          locations=_present('razorlib.engine', 'razorlib.algorithms'))
# Pruners have no counterpart among mmengine's roots; they get a root of their own.
PRUNERS = Registry('pruner', scope=SCOPE, locations=_present('razorlib.pruning'))
TASK_UTILS = Registry('task util', parent=MMENGINE_TASK_UTILS, scope=SCOPE,
                      locations=_present('razorlib.utils'))
LOOPS = Registry('loop', parent=MMENGINE_LOOPS, scope=SCOPE,
                 locations=_present('razorlib.engine'))
HOOKS = Registry('hook', parent=MMENGINE_HOOKS, scope=SCOPE,
                 locations=_present('razorlib.engine'))
DATASETS = Registry('dataset', parent=MMENGINE_DATASETS, scope=SCOPE,
                    locations=_present('razorlib.datasets'))
DATA_SAMPLERS = Registry('data sampler', parent=MMENGINE_DATA_SAMPLERS, scope=SCOPE,
                         locations=_present('razorlib.datasets'))
TRANSFORMS = Registry('transform', parent=MMENGINE_TRANSFORMS, scope=SCOPE,
                      locations=_present('razorlib.datasets'))
METRICS = Registry('metric', parent=MMENGINE_METRICS, scope=SCOPE,
                   locations=_present('razorlib.evaluation'))
EVALUATOR = Registry('evaluator', parent=MMENGINE_EVALUATOR, scope=SCOPE,
                     locations=_present('razorlib.evaluation'))
OPTIMIZERS = Registry('optimizer', parent=MMENGINE_OPTIMIZERS, scope=SCOPE)
OPTIM_WRAPPERS = Registry('optim_wrapper', parent=MMENGINE_OPTIM_WRAPPERS, scope=SCOPE)
# The Runner builds its optimizer wrapper through this one; without a razorlib child
# mmengine warns and falls back to its own on every run.
OPTIM_WRAPPER_CONSTRUCTORS = Registry('optimizer wrapper constructor',
                                      parent=MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS, scope=SCOPE)
PARAM_SCHEDULERS = Registry('parameter scheduler', parent=MMENGINE_PARAM_SCHEDULERS,
                            scope=SCOPE)
# Collate functions; a child so that lookups in the razorlib scope find mmengine's.
FUNCTIONS = Registry('function', parent=MMENGINE_FUNCTIONS, scope=SCOPE)
VISUALIZERS = Registry('visualizer', parent=MMENGINE_VISUALIZERS, scope=SCOPE)
VISBACKENDS = Registry('vis_backend', parent=MMENGINE_VISBACKENDS, scope=SCOPE)


def register_all_modules(init_default_scope: bool = True) -> None:
    """Import every razorlib package that registers components.

    Args:
        init_default_scope: also make ``razorlib`` the current default scope, so that
            unqualified type names in configs resolve to razorlib's registries first.
    """
    import importlib
    import pkgutil

    import razorlib
    for info in pkgutil.iter_modules(razorlib.__path__, 'razorlib.'):
        if info.ispkg:
            importlib.import_module(info.name)
    if init_default_scope and DefaultScope.get_current_instance() is None:
        DefaultScope.get_instance('razorlib', scope_name=SCOPE)
