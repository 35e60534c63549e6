"""Load a tool's config and check it, with errors that name the key at fault.

mmengine reports a type that is not registered, or an argument a class does not take,
only when it builds the object, naming the class but not where the config says it.
:func:`check_config` walks the parts of a config that the Runner builds from registries
and reports such mistakes up front as ``model.architecture.backbone.type: ...``.

Example:
    >>> from mmengine.config import Config
    >>> cfg = Config(dict(model=dict(type='ImageClassifier', backbone=dict(type='ResNt'),
    ...                              head=dict(type='LinearClsHead', num_classes=10))))
    >>> check_config(cfg, required=('model', ))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    razorlib.engine.config.ConfigError: model.backbone.type: 'ResNt' is not registered ...
"""
import inspect
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Union

from mmengine.config import Config
from mmengine.registry import (DATA_SAMPLERS, DATASETS, FUNCTIONS, HOOKS, LOOPS, METRICS,
                               MODEL_WRAPPERS, MODELS, OPTIM_WRAPPERS, OPTIMIZERS,
                               PARAM_SCHEDULERS, TRANSFORMS, Registry)

from ..registry import PRUNERS, SCOPE

#: Nested keys whose value is built from another registry than its parent's.
NESTED = {'pruner': PRUNERS, 'data_preprocessor': MODELS, 'dataset': DATASETS,
          'sampler': DATA_SAMPLERS, 'batch_sampler': DATA_SAMPLERS, 'collate_fn': FUNCTIONS,
          'transforms': TRANSFORMS, 'pipeline': TRANSFORMS, 'optimizer': OPTIMIZERS}
#: Nested keys of a model that hold its sub-models.
MODEL_PARTS = ('architecture', 'backbone', 'neck', 'head')

#: What each tool needs in its config.
TRAIN_KEYS = ('model', 'train_dataloader', 'train_cfg', 'optim_wrapper')
TEST_KEYS = ('model', 'test_dataloader', 'test_cfg', 'test_evaluator')


class ConfigError(ValueError):
    """A config mistake; the message starts with the key at fault."""


def load_config(path: Union[str, Path], cfg_options: Optional[Dict[str, Any]] = None) -> Config:
    """Read a config file and merge ``--cfg-options`` into it.

    Args:
        path: the config file.
        cfg_options: ``{'dotted.key': value}`` overrides, as ``DictAction`` parses them.
    """
    if not Path(path).is_file():
        raise ConfigError(f'config file {path} does not exist')
    cfg = Config.fromfile(str(path))
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return cfg


def set_work_dir(cfg: Config, config_path: Union[str, Path],
                 work_dir: Optional[str] = None) -> str:
    """Set ``cfg.work_dir``: ``work_dir`` (``--work-dir``), else the config's own, else
    ``work_dirs/<config name>`` as in OpenMMLab tools; returns it.

    Example:
        >>> set_work_dir(Config(dict()), 'configs/run.py')
        'work_dirs/run'
    """
    cfg.work_dir = work_dir or cfg.get('work_dir') or str(Path('work_dirs') /
                                                          Path(config_path).stem)
    return cfg.work_dir


def check_config(cfg: Config, required: Sequence[str] = TRAIN_KEYS) -> None:
    """Check the keys a tool needs, the registered types and their arguments.

    Types are looked up as the Runner will build them, in the config's
    ``default_scope`` (default ``'razorlib'``); arguments are checked against the
    signatures of classes that do not take ``**kwargs``.  Parts the Runner does not
    build from a registry, and sub-configs of unknown nested keys, are left alone.

    Raises:
        ConfigError: the first mistake, its message starting with the dotted key.
    """
    for key in required:
        if cfg.get(key) is None:
            raise ConfigError(f'{key}: missing; this tool needs {", ".join(required)}')
    scope = cfg.get('default_scope') or SCOPE
    model = cfg.get('model')
    if model is not None:
        _check_node(model, 'model', MODELS, scope, _model_children)
    for key in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        if cfg.get(key) is not None:
            _check_children(cfg[key], key, scope, _data_children)
    for key in ('val_evaluator', 'test_evaluator'):
        evaluator = cfg.get(key)
        if isinstance(evaluator, dict) and 'metrics' in evaluator:
            evaluator, key = evaluator['metrics'], f'{key}.metrics'
        _check_each(evaluator, key, METRICS, scope)
    if cfg.get('optim_wrapper') is not None:
        _check_node(cfg.optim_wrapper, 'optim_wrapper', OPTIM_WRAPPERS, scope, _data_children,
                    check_args=False)
    _check_each(cfg.get('param_scheduler'), 'param_scheduler', PARAM_SCHEDULERS, scope)
    _check_each(cfg.get('custom_hooks'), 'custom_hooks', HOOKS, scope)
    for name, hook in (cfg.get('default_hooks') or {}).items():
        _check_each(hook, f'default_hooks.{name}', HOOKS, scope)
    for key in ('train_cfg', 'val_cfg', 'test_cfg'):
        if isinstance(cfg.get(key), dict) and 'type' in cfg[key]:
            _check_node(cfg[key], key, LOOPS, scope, check_args=False)
    wrapper = cfg.get('model_wrapper_cfg')
    if isinstance(wrapper, dict) and isinstance(wrapper.get('type'), str) \
            and MODEL_WRAPPERS.get(wrapper['type']) is None:
        # mmengine 0.10.7's Runner.wrap_model looks the type up in mmengine's root
        # registry, ignoring the default scope.
        raise ConfigError(f"model_wrapper_cfg.type: {wrapper['type']!r} is not found; the "
                          'Runner looks wrapper types up without the default scope, so '
                          "name razorlib's with their scope, e.g. 'razorlib.AutoSlimDDP'")


def _check_each(value: Any, key: str, registry: Registry, scope: str) -> None:
    """A config, or a list of configs, built from ``registry``."""
    items = value if isinstance(value, (list, tuple)) else [value]
    for index, item in enumerate(items):
        where = f'{key}[{index}]' if isinstance(value, (list, tuple)) else key
        if isinstance(item, dict):
            _check_node(item, where, registry, scope)


def _model_children(key: str) -> Optional[Registry]:
    return NESTED.get(key, MODELS if key in MODEL_PARTS else None)


def _data_children(key: str) -> Optional[Registry]:
    return NESTED.get(key)


def _check_children(cfg: dict, where: str, scope: str,
                    children: Callable[[str], Optional[Registry]]) -> None:
    for key, value in cfg.items():
        registry = children(key)
        if registry is None:
            continue
        items = value if isinstance(value, (list, tuple)) else [value]
        for index, item in enumerate(items):
            sub = f'{where}.{key}[{index}]' if isinstance(value, (list, tuple)) \
                else f'{where}.{key}'
            if isinstance(item, dict) and 'type' in item:
                _check_node(item, sub, registry, scope, children)


def _check_node(cfg: dict, where: str, registry: Registry, scope: str,
                children: Callable[[str], Optional[Registry]] = _data_children,
                check_args: bool = True) -> None:
    """Check ``cfg['type']`` in ``registry``, its arguments, then its nested configs."""
    scope = cfg.get('_scope_', scope)
    if 'type' in cfg:
        obj = _lookup(cfg['type'], registry, scope, f'{where}.type')
        if check_args and obj is not None:
            _check_arguments(obj, cfg, where)
    _check_children(cfg, where, scope, children)


def _lookup(name: Any, registry: Registry, scope: str, where: str) -> Any:
    if not isinstance(name, str):
        return name  # a class or function given directly
    if registry is PRUNERS:  # razorlib's own root: no other scope has pruners
        scope = SCOPE
    with registry.switch_scope_and_registry(scope) as scoped:
        obj = scoped.get(name)
    if obj is None:
        raise ConfigError(f'{where}: {name!r} is not registered in the {registry.name} '
                          f'registry (scope {scope!r})')
    return obj


def _check_arguments(obj: Any, cfg: dict, where: str) -> None:
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    for key in cfg:
        if key != 'type' and not key.startswith('_') and key not in params:
            accepted = [name for name in params if name != 'self']
            raise ConfigError(f'{where}.{key}: {getattr(obj, "__name__", obj)} takes no '
                              f'argument {key!r}; it takes {accepted}')
