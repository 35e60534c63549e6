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
import ast
import numbers
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Union

import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import (DATA_SAMPLERS, DATASETS, FUNCTIONS, HOOKS, LOOPS, METRICS,
                               MODEL_WRAPPERS, MODELS, OPTIM_WRAPPERS, OPTIMIZERS,
                               PARAM_SCHEDULERS, TRANSFORMS, Registry, init_default_scope)

from ..registry import PRUNERS, SCOPE
from ..utils.checks import keyword_parameters
from ..utils.cli import closest

#: Nested keys whose value is built from another registry than its parent's.
NESTED = {'pruner': PRUNERS, 'data_preprocessor': MODELS, 'dataset': DATASETS,
          'sampler': DATA_SAMPLERS, 'batch_sampler': DATA_SAMPLERS, 'collate_fn': FUNCTIONS,
          'transforms': TRANSFORMS, 'pipeline': TRANSFORMS, 'optimizer': OPTIMIZERS}
#: Nested keys of a model that hold its sub-models (``teacher``: a distiller's, built
#: from ``MODELS`` as its student ``architecture`` is).
MODEL_PARTS = ('architecture', 'backbone', 'neck', 'head', 'teacher')

#: Keys whose config is a loop (``search_cfg``: what tools/search.py runs as its val loop).
LOOP_KEYS = ('train_cfg', 'val_cfg', 'test_cfg', 'search_cfg')

#: What each tool needs in its config.
TRAIN_KEYS = ('model', 'train_dataloader', 'train_cfg', 'optim_wrapper')
TEST_KEYS = ('model', 'test_dataloader', 'test_cfg', 'test_evaluator')

#: What razorlib's constructors raise for a config value they refuse: a negative
#: ``step_freq``, ``flops=1.5``, an unknown importance or layer name, a teacher checkpoint
#: of another model, a ``channel_cfg`` file not written yet.
BUILD_ERRORS = (ValueError, TypeError, KeyError, FileNotFoundError)


def message_of(err: Exception) -> str:
    """``err``'s message; a KeyError's ``str()`` is its message quoted.

    Example:
        >>> message_of(KeyError("'X' is not registered")), str(KeyError('x'))
        ("'X' is not registered", "'x'")
    """
    return err.args[0] if isinstance(err, KeyError) and err.args else str(err)


class ConfigError(ValueError):
    """A config mistake; the message starts with the key at fault."""


def check_integers(**settings: Any) -> None:
    """Refuse a loop setting that is no integer (a bool, a float, a string), naming it: a
    count of generations, candidates, batches or bins given as ``8.0`` or ``'8'`` passes
    a range check (or fails in it with a bare ``TypeError``), and then fails inside
    ``range()``, ``islice()`` or a slice, with a traceback naming no setting, some after
    the search has scored candidates.  ``None`` passes (an optional setting left unset);
    the ranges are the caller's to check.

    Raises:
        ConfigError: ``KEY must be an integer, got VALUE (a TYPE)``.

    Example:
        >>> check_integers(max_epochs=8, val_batches=None)
        >>> check_integers(top_k=4.0)
        Traceback (most recent call last):
        ...
        razorlib.engine.config.ConfigError: top_k must be an integer, got 4.0 (a float)
    """
    for key, value in settings.items():
        if value is not None and (isinstance(value, bool)
                                  or not isinstance(value, numbers.Integral)):
            raise ConfigError(f'{key} must be an integer, got {value!r} '
                              f'(a {type(value).__name__})')


def load_config(path: Union[str, Path], cfg_options: Optional[Dict[str, Any]] = None) -> Config:
    """Read a config file and merge ``--cfg-options`` into it.

    The file and its ``_base_`` files are compiled first, so that a syntax error names the
    file and line (mmengine's own parse reports ``File "<unknown>"``); a config that fails
    while it runs is reported with its exception in one line.

    Args:
        path: the config file.
        cfg_options: ``{'dotted.key': value}`` overrides, as ``DictAction`` parses them.

    Raises:
        ConfigError: a missing file, a syntax error (``line N: ...``, prefixed by the base
            file's path when it is in a ``_base_`` file) or an error while the config runs.

    Example:
        >>> import tempfile
        >>> bad = Path(tempfile.mkdtemp()) / 'bad.py'
        >>> _ = bad.write_text("model = dict(type='PlainCNN')\\nsizes = (8,\\n")
        >>> load_config(bad)
        Traceback (most recent call last):
        ...
        razorlib.engine.config.ConfigError: line 2: '(' was never closed: sizes = (8,
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f'config file {path} does not exist')
    _check_syntax(path, path, set())
    try:
        cfg = Config.fromfile(str(path))
    except FileNotFoundError as err:
        raise ConfigError(f'_base_: {err.filename} does not exist') from err
    except Exception as err:  # the user's Python, run by mmengine: any error it raises
        raise ConfigError(f'the config failed while it ran: {type(err).__name__}: {err}') \
            from err
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return cfg


def _check_syntax(path: Path, config: Path, seen: Set[Path]) -> None:
    """Compile ``path`` (a Python config) and, recursively, its local ``_base_`` files."""
    if path.suffix != '.py' or path.resolve() in seen:
        return
    seen.add(path.resolve())
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as err:
        where = '' if path == config else f'{path}, '
        text = (err.text or '').strip()
        raise ConfigError(f'{where}line {err.lineno}: {err.msg}'
                          + (f': {text}' if text else '')) from None
    for base in _local_bases(tree, path.parent):
        _check_syntax(base, config, seen)


def _local_bases(tree: ast.Module, folder: Path) -> Iterator[Path]:
    """The existing files a config's literal ``_base_`` names (not ``package::`` ones)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == '_base_' for target in node.targets):
            try:
                bases = ast.literal_eval(node.value)
            except ValueError:
                return
            bases = [bases] if isinstance(bases, str) else bases
            for base in bases if isinstance(bases, (list, tuple)) else ():
                if isinstance(base, str) and '::' not in base and (folder / base).is_file():
                    yield folder / base


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

    A config of another OpenMMLab project (``default_scope='mmpretrain'``) names
    razorlib's components ``'razorlib.X'``: a type its scope lacks but another scope
    registers is reported with the qualified name to write, and arguments that the
    class found does not take, when another scope registers a class of the same name,
    with that scope (see docs/mm_projects.md).

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
            check_dataloader(cfg[key], key, scope)
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
    for key in LOOP_KEYS:
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


def build_model(cfg: Config) -> nn.Module:
    """Build ``cfg.model`` as the Runner will (``cfg.data_preprocessor`` merged in, types
    looked up in the config's default scope), so that a tool reports a value the
    constructors refuse before the Runner makes the work dir, instead of a traceback
    after it.  Errors of other kinds (a bug, torch running out of memory) propagate.

    Raises:
        ConfigError: ``model: <what the constructor said>``.

    Example:
        >>> build_model(Config(dict(model=dict(type='ItePruneAlgorithm', step_freq=-1,
        ...     architecture=dict(type='mmengine.BaseModel')))))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        razorlib.engine.config.ConfigError: model: ItePruneAlgorithm: step_freq must be ...
    """
    model_cfg = dict(cfg.model)
    if cfg.get('data_preprocessor') is not None:  # as Runner.__init__ merges it
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    init_default_scope(cfg.get('default_scope') or SCOPE)
    try:
        return MODELS.build(model_cfg)
    except BUILD_ERRORS as err:
        raise ConfigError(f'model: {message_of(err)}') from err


def _check_each(value: Any, key: str, registry: Registry, scope: str) -> None:
    """A config, or a list of configs, built from ``registry``."""
    items = value if isinstance(value, (list, tuple)) else [value]
    for index, item in enumerate(items):
        where = f'{key}[{index}]' if isinstance(value, (list, tuple)) else key
        if isinstance(item, dict):
            _check_node(item, where, registry, scope)


def _model_children(key: str) -> Optional[Registry]:
    return NESTED.get(key, MODELS if key in MODEL_PARTS else None)


def check_dataloader(loader_cfg: dict, key: str, scope: str = SCOPE) -> None:
    """Check the registry types (dataset, sampler, collate function, transforms) of a
    dataloader config found under ``key`` (any key: ``calib_dataloader`` too) and their
    arguments, as :func:`check_config` checks the three dataloaders it knows.

    Raises:
        ConfigError: the first mistake, its message starting with ``key``'s dotted path.
    """
    _check_children(loader_cfg, key, scope, _data_children)


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
            _check_arguments(obj, cfg, where, registry, scope)
    _check_children(cfg, where, scope, children)


def _lookup(name: Any, registry: Registry, scope: str, where: str) -> Any:
    if not isinstance(name, str):
        return name  # a class or function given directly
    if registry is PRUNERS:  # razorlib's own root: no other scope has pruners
        scope = SCOPE
    with registry.switch_scope_and_registry(scope) as scoped:
        obj = scoped.get(name)
    if obj is None:
        others = _scopes_having(registry, name)
        hint = (f"; scope {others[0]!r} registers it: write type='{others[0]}.{name}' (a "
                "config reaches another project's components by their scoped names)"
                if others else '')
        raise ConfigError(f'{where}: {name!r} is not registered in the {registry.name} '
                          f'registry (scope {scope!r}){hint}')
    return obj


def _scopes_having(registry: Registry, name: str) -> List[str]:
    """The scopes (besides mmengine's root) whose registry of ``registry``'s kind
    registers the unscoped ``name``, their lazy ``locations`` imported first."""
    if '.' in name:
        return []
    found, stack = [], list(registry.root.children.values())
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        node.import_from_location()
        if name in node.module_dict:
            found.append(node.scope)
    return sorted(found)


def _check_arguments(obj: Any, cfg: dict, where: str, registry: Registry, scope: str) -> None:
    params = _accepted_keywords(obj)
    if params is None:  # **kwargs, or no signature to read
        return
    for key in cfg:
        if key != 'type' and not key.startswith('_') and key not in params:
            near = closest(key, params)
            raise ConfigError(f'{where}.{key}: {getattr(obj, "__name__", obj)} takes no '
                              f'argument {key!r}'
                              + (f' (closest: {", ".join(near)})' if near else '')
                              + f'; it takes {params}'
                              + _namesake_hint(obj, cfg['type'], registry, scope))


def _accepted_keywords(obj: Any) -> Optional[List[str]]:
    """The keywords a config may give ``obj``, None when any is taken.

    razorlib's classes pass their ``**kwargs`` on to their bases (``ImportancePruner`` to
    ``StructurePruner``), so their bases' signatures say what they take: read through
    them, a misspelled ``flop=0.5`` is refused here, by its key, rather than by the
    constructor's bare ``TypeError`` once the Runner has made the work dir.  Other
    projects' classes may keep their ``**kwargs`` (an optimizer's ``**defaults``), and
    are left to their constructors.

    Example:
        >>> from razorlib.pruning import ImportancePruner
        >>> 'flops' in _accepted_keywords(ImportancePruner)
        True
    """
    ours = isinstance(obj, type) and obj.__module__.split('.')[0] == SCOPE
    params = keyword_parameters(obj, through_bases=ours)
    return None if params is None else list(dict.fromkeys(params))


def _namesake_hint(obj: Any, name: Any, registry: Registry, scope: str) -> str:
    """When other scopes register a different class under ``name``: which one the
    default scope picked, and how to name another."""
    if not isinstance(name, str):
        return ''
    others = [other for other in _scopes_having(registry, name)
              if registry.get(f'{other}.{name}') is not obj]
    if not others:
        return ''
    return (f"; default_scope {scope!r} picked {obj.__module__}.{obj.__name__}, and scope "
            f"{others[0]!r} has another {name!r}: write type='{others[0]}.{name}', or set "
            f"default_scope={others[0]!r} and name razorlib's components 'razorlib.X' "
            '(docs/mm_projects.md)')
