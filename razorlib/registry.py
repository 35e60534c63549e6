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
# What razorlib knows about a module type (razorlib.layers.LayerKind), keyed by kind name;
# razorlib.layers.kind_of looks a module up by its type, the most derived class winning.
LAYER_KINDS = Registry('layer kind', scope=SCOPE, locations=_present('razorlib.layers'))
# How an attention module's code sizes its heads (razorlib.layers.HeadAttributes): the
# attributes slicing rewrites once the module's projections lose heads.
HEAD_ATTRIBUTES = Registry('head attributes', scope=SCOPE, locations=_present('razorlib.layers'))
# grad_fn name (as torch emits it, 'ConvolutionBackward0') -> razorlib.tracing.rules.Rule.
TRACING_RULES = Registry('tracing rule', scope=SCOPE, locations=_present('razorlib.tracing'))
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


# The IR, quantization, NAS and importance criteria: roots of their own, as mmengine has
# none of these.  Keys are class names, with the short aliases the classes declare ('kl',
# 'conservative', 'TRT_INT8', 'fuse_bn'); kernels are keyed by op type ('Conv', and
# 'domain::Type' outside the default domain).
# Observer (a config's observer_algorithm) -> razorlib.quantization.Observer subclass.
OBSERVERS = Registry('observer', scope=SCOPE, locations=_present('razorlib.quantization'))
# Quantized platform name ('TRT_INT8') or class name -> razorlib.quantization.BaseQuantizer.
QUANTIZERS = Registry('quantizer', scope=SCOPE, locations=_present('razorlib.quantization'))
# Dispatcher name ('conservative') or class name -> razorlib.quantization.GraphDispatcher.
DISPATCHERS = Registry('dispatcher', scope=SCOPE, locations=_present('razorlib.quantization'))
# Export format name ('QDQ_ONNX') -> the function writing it, (graph, path, **options).
EXPORTERS = Registry('exporter', scope=SCOPE, locations=_present('razorlib.quantization'))
# Graph passes (razorlib.ir.passes.GraphPass): the IR's rewrites and quantization's links.
GRAPH_PASSES = Registry('graph pass', scope=SCOPE,
                        locations=_present('razorlib.ir', 'razorlib.quantization'))
# Post-training quantization passes that need calibration data (equalization, bias
# correction, AdaRound, mixed precision): razorlib.quantization.passes.PTQPass.
PTQ_PASSES = Registry('ptq pass', scope=SCOPE, locations=_present('razorlib.quantization'))
# ONNX op type -> the builder of its torch kernel (razorlib.ir.executor.kernels).
KERNELS = Registry('kernel', scope=SCOPE, locations=_present('razorlib.ir'))
# NAS mutables (razorlib.nas): OneShotMutableOP, DiffMutableOP, OneShotMutableValue.
MUTABLES = Registry('mutable', scope=SCOPE, locations=_present('razorlib.nas'))
# Channel importance criteria (razorlib.pruning.importance.Importance), by class name and
# short alias ('l1', 'l2', 'bn_scale', 'fpgm', 'taylor', 'fisher', 'activation', 'apoz',
# 'random').
IMPORTANCES = Registry('importance', scope=SCOPE, locations=_present('razorlib.pruning'))


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
