"""``razorlib.prune``: trace, score, allocate to a budget and slim a model in one call."""
import copy
import difflib
import inspect
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple,
                    Union)

import numpy as np
import torch
import torch.nn as nn

from ..registry import PRUNERS
from ..tracing.forward import call_model, default_example_inputs, is_transformers_model
from ..utils.batch_norm import reestimate_bn_stats
from ..utils.caller import warn_at_caller
from ..utils.checks import keyword_parameters, switch
from ..utils.complexity import Complexity
from ..utils.modes import evaluating
from .allocation import (SubnetMeter, WidthRule, allocate, budget_of, refuse_unreachable,
                         within)
from .data import pair_batches
from .importance import ImportanceArg
from .importance.pruner import ImportancePruner
from .latency import SubnetLatency
from .runtimes import Runtime, RuntimeArg, check_runtime
from .structure import StructurePruner, SubnetDict

_BUDGET_KEYS = ('ratio', 'ratios', 'flops', 'params', 'latency')


class _Default:
    """A keyword's default in :func:`prune`'s signature, told apart from the same value
    given: a ``pruner`` config's own option yields to a value given in the call, not to
    a default (``repr`` is the value's, so the signature reads as usual)."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


def prune(model: nn.Module, example_inputs: Any = None, *, ratio: Optional[float] = None,
          flops: Optional[float] = None, params: Optional[float] = None,
          latency: Optional[float] = None, runtime: RuntimeArg = _Default('torch'),
          importance: ImportanceArg = _Default('l1'), global_ranking: bool = _Default(False),
          sensitivity: Union[bool, Dict[str, Any]] = _Default(False),
          data: Optional[Any] = None,
          loss_fn: Optional[Callable[[Any, Any], torch.Tensor]] = None,
          round_to: int = _Default(1), max_ratio: Optional[float] = _Default(None),
          pruner: Union[str, dict] = 'ImportancePruner',
          hidden: bool = False, **pruner_kwargs: Any) -> nn.Module:
    """Return a slimmed copy of ``model`` within one budget.

    The original model is left untouched.  Channels are ranked by ``importance`` in each
    group; the budget is a ratio of channels or a fraction of the dense model's FLOPs,
    params or latency (measured on ``runtime``), met by one ratio for every group or,
    with ``global_ranking``, by ranking all groups' channels together
    (:mod:`razorlib.pruning.allocation`).  A budget that cannot
    be met raises before anything is sliced, naming the smallest reachable value.

    The slim copy is run once on ``example_inputs`` before it is returned, so a model
    whose code cannot follow the new widths fails here, with the module at fault named,
    rather than later.  Layers left unpruned around an op razorlib cannot prune through
    (an op missing from the rule table such as ``torch.fft.rfft2``, a custom
    ``autograd.Function``) are named in one warning per call; ``strict=True`` raises on
    the first instead.

    A transformers ``PreTrainedModel`` (dict inputs: ``{'input_ids': ...}``) loses whole
    attention heads and MLP channels; its hidden size stays whole unless ``hidden=True``.
    Its slim copy's config is rewritten to describe the slim widths where it can, and a
    warning names what it cannot (save such a model with
    :func:`razorlib.integrations.transformers.save_pruned`);
    :func:`razorlib.integrations.transformers.prune` also keeps repeated layers' widths
    uniform.

    Args:
        model: the model to prune.
        example_inputs: a tensor, tuple of args or dict of kwargs for one forward;
            default a random 1x3x224x224 image.  FLOPs are counted on it.
        ratio: fraction of channels to keep in each prunable group (of all channels with
            ``global_ranking``); 0.5 if no budget is given.
        flops: keep at most this fraction of the dense model's FLOPs.
        params: keep at most this fraction of the dense model's parameters.
        latency: run in at most this fraction of the dense model's latency, measured on
            ``runtime`` (:mod:`razorlib.pruning.latency`; per-layer tables are cached on
            disk).
        runtime: where latency is measured: ``'torch'`` (eager CPU), ``'onnxruntime'``
            (CPU), ``'cuda'``, a config dict (``dict(type='onnxruntime', repeat=50)``) or
            a :class:`~razorlib.pruning.runtimes.Runtime`.
        importance: the criterion: ``'l1'``, ``'l2'``, ``'bn_scale'``, ``'fpgm'``,
            ``'taylor'``, ``'fisher'``, ``'activation'``, ``'apoz'``, ``'random'``, a config
            dict (``dict(type='l1', normalize='lamp')``) or an ``Importance``.
        global_ranking: rank all groups' channels together instead of one ratio each.
        sensitivity: give each group the width whose loss increase, the group cut alone
            and measured on ``data``, stays under a threshold common to all groups, the
            threshold set by the budget (FastNAS's allocation:
            :mod:`razorlib.pruning.sensitivity`); True or a dict of options
            (``dict(steps=10)``; ``dict(greedy=True)`` cuts one group a step at a time
            instead, each time the one whose loss increase per unit of the budget saved is
            least, measured on the model as cut so far).  Needs ``data``; not with
            ``global_ranking``.
        data: an iterable of ``(inputs, targets)`` batches: what data-driven criteria
            run on, and, after slicing, what the batch norms' running statistics are
            re-estimated on.  A FLOPs or params budget the width rules cannot meet
            (a latency budget where they leave nothing to prune) is refused before it is
            read.  A one-shot iterator is read into a list first; a list or a
            ``DataLoader`` is read again on each pass, one batch in memory at a time
            (the sensitivity and greedy allocations read it into a list).
        loss_fn: ``loss_fn(outputs, targets)`` for gradient criteria; default
            cross-entropy.
        round_to: each leader layer keeps a multiple of this many channels (or all).
        max_ratio: the largest fraction of one group that may be pruned.
        pruner: a pruner type registered in ``PRUNERS`` or a config dict; a pruner that
            is not an ``ImportancePruner`` (``'RatioPruner'``) ranks channels its own way.
            An ``ImportancePruner`` config's own ``runtime``, ``importance``,
            ``global_ranking``, ``sensitivity``, ``round_to`` and ``max_ratio`` hold where
            the call does not give them; one the call gives wins over the config's (the
            call's budget replaces the config's).
        hidden: for a transformers ``PreTrainedModel``, also prune the hidden size (the
            residual stream from the input embeddings) where the tracer finds it
            prunable.  Off by default: every norm then normalises over fewer channels,
            so the outputs change by more than the pruned channels' share (the slim
            model still computes what the masked supernet does); a warning says so when
            it happens.  Other models have no such default: this flag changes nothing.
        **pruner_kwargs: extra pruner arguments (``except_start_keys``, ``strict``,
            ``gqa='query'``: under grouped-query attention prune the same query heads in
            every key/value group and keep the key/value heads, instead of a key/value
            head with its query heads; ``heads='width'``: prune the same ``head_dim``
            positions of every head instead of whole heads, RoPE pairs and the rotary
            ``inv_freq`` with them, checked masked against slim).

    Example:
        >>> import torch, razorlib
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.BatchNorm2d(16),
        ...                           torch.nn.ReLU(), torch.nn.Conv2d(16, 4, 1))
        >>> razorlib.prune(net, torch.randn(1, 3, 8, 8), ratio=0.25)[1].num_features
        4
        >>> razorlib.prune(net, torch.randn(1, 3, 8, 8), flops=0.4, round_to=4)[0]
        Conv2d(3, 4, kernel_size=(3, 3), stride=(1, 1))
    """
    return slim_copy(model, example_inputs, dict(
        ratio=ratio, flops=flops, params=params, latency=latency, runtime=runtime,
        importance=importance, global_ranking=global_ranking, sensitivity=sensitivity,
        data=data, loss_fn=loss_fn, round_to=round_to, max_ratio=max_ratio, pruner=pruner,
        hidden=hidden), pruner_kwargs)


PRUNE_DEFAULTS: Dict[str, Any] = {
    name: (parameter.default.value if isinstance(parameter.default, _Default)
           else parameter.default)
    for name, parameter in inspect.signature(prune).parameters.items()
    if parameter.kind is inspect.Parameter.KEYWORD_ONLY}
""":func:`prune`'s keyword arguments and their defaults."""

SubnetReshape = Callable[[StructurePruner, SubnetDict], SubnetDict]
"""Changes a chosen subnet before it is sliced (the HF integration's uniform widths)."""


def slim_copy(model: nn.Module, example_inputs: Any, call: Dict[str, Any],
              pruner_kwargs: Dict[str, Any], reshape: Optional[SubnetReshape] = None,
              caller: str = 'razorlib.prune') -> nn.Module:
    """What :func:`prune` does, given its keyword arguments as ``call`` (those left out,
    or left at their defaults, take :data:`PRUNE_DEFAULTS`, or the ``pruner`` config's
    own option) and its extra pruner arguments, with a hook between
    choosing the subnet and slicing it (``reshape``: the uniform widths of
    :func:`razorlib.integrations.transformers.prune`).

    Every argument is checked before the copy is sliced.  A transformers model keeps its
    hidden size unless ``hidden``; its slim copy's ``config`` is rewritten to describe
    the slim widths where it can
    (:func:`~razorlib.integrations.transformers.sync_config`), and a warning names what
    it cannot describe and how to save it.
    """
    unknown = sorted(set(call) - set(PRUNE_DEFAULTS))
    if unknown:
        raise TypeError(f'{caller}: unexpected argument {unknown[0]!r}')
    given = {k for k, v in call.items() if not isinstance(v, _Default)}
    call = {**PRUNE_DEFAULTS, **{k: v for k, v in call.items() if k in given}}
    budget = {k: call[k] for k in ('ratio', 'flops', 'params', 'latency')}
    options = {k: call[k] for k in ('importance', 'global_ranking', 'round_to', 'max_ratio',
                                    'runtime', 'sensitivity')}
    data, loss_fn, hidden = call['data'], call['loss_fn'], call['hidden']
    budget_of(**budget)
    switch(options['global_ranking'], f'{caller}: global_ranking')  # 'no' is true to bool()
    hidden = switch(hidden, f'{caller}: hidden')  # 'no' would prune a hidden size
    _check_pruner(call['pruner'], caller)
    _check_pruner_kwargs(call['pruner'], pruner_kwargs, caller)
    budget = {k: v for k, v in budget.items() if v is not None}
    cfg = _pruner_cfg(call['pruner'], budget, options, given, pruner_kwargs)
    _check_runtime(cfg.get('runtime', options['runtime']), cfg, caller)
    hf = is_transformers_model(model)
    if hf and not hidden:  # the integration loads for HF models only
        from ..integrations.transformers.prune import with_hidden_size_keys
        cfg['except_start_keys'] = with_hidden_size_keys(model, cfg.get('except_start_keys'))
    structure_pruner = PRUNERS.build(cfg)
    if example_inputs is None:
        example_inputs = default_example_inputs(model)
    slim = copy.deepcopy(model)
    experts: List[str] = []
    if hf:  # each routed expert its own module, so that its width prunes
        from ..integrations.transformers.prune import split_routed_experts
        experts = split_routed_experts(slim)
    structure_pruner.prepare_from_supernet(slim, example_inputs)
    if not structure_pruner.strict:
        _warn_unpruned(structure_pruner.groups.strict_reasons())
    hidden_keys: List[str] = []
    if hf:
        from ..integrations.transformers.prune import (hidden_size_keys, warn_if_hidden_kept,
                                                       warn_whole_attention)
        warn_whole_attention(model, structure_pruner.groups, caller)
        if hidden:
            warn_if_hidden_kept(model, structure_pruner.groups, caller)
            hidden_keys = hidden_size_keys(model)
    dense = None
    if data is not None:  # a budget out of reach is refused before data= is read
        dense = _refuse_unreachable(structure_pruner, budget, options, example_inputs)
        data = pair_batches(data, caller)
    subnet, dense = _choose_subnet(structure_pruner, budget, options, example_inputs, data,
                                   loss_fn, dense)
    if reshape is not None:
        subnet = reshape(structure_pruner, subnet)
    if experts:  # one width per layer's experts, to stack them again
        from ..integrations.transformers.prune import uniform_experts
        subnet = uniform_experts(structure_pruner, subnet, experts,
                                 _meets_budget(structure_pruner, budget, example_inputs, dense))
    _warn_if_nothing_pruned(structure_pruner, subnet, budget, caller)
    _warn_norm_statistics(structure_pruner, subnet, caller, hidden_keys)
    structure_pruner.set_subnet(subnet)
    structure_pruner.deploy_subnet(slim, structure_pruner.export_subnet())
    _check_runs(slim, example_inputs)
    if experts:
        from ..nn.experts import fuse_experts
        fuse_experts(slim)
    if hf:
        from ..integrations.transformers.prune import describe_slim_config
        describe_slim_config(model, slim, caller, hidden, example_inputs)
    if data is not None:
        reestimate_bn_stats(slim, (inputs for inputs, _ in data))
    return slim


def _check_pruner(pruner: Any, caller: str) -> None:
    """Refuse a ``pruner`` that names no registered pruner class, naming ``pruner=`` and
    the registered ones: a config dict without ``'type'`` would otherwise fail as a bare
    ``KeyError: 'type'`` (or the registry's words, which name neither), and a value that
    is no name or dict as ``'int' object is not iterable``."""
    known = sorted(PRUNERS.module_dict)
    if not isinstance(pruner, (str, Mapping)):
        raise TypeError(f'{caller}: pruner= is a registered pruner name ({", ".join(known)}) or '
                        f'a config dict, got {pruner!r} ({type(pruner).__name__})')
    kind = pruner if isinstance(pruner, str) else pruner.get('type')
    if kind is None:
        raise ValueError(f"{caller}: the pruner config {dict(pruner)!r} has no 'type'; "
                         f'registered pruners: {", ".join(known)}')
    if isinstance(kind, str) and PRUNERS.get(kind) is None:
        raise ValueError(f'{caller}: pruner {kind!r} is not registered; registered pruners: '
                         f'{", ".join(known)}')


def _check_pruner_kwargs(pruner: Union[str, dict], pruner_kwargs: Dict[str, Any],
                         caller: str) -> None:
    """Refuse an extra argument the pruner does not take, with the closest name among
    :func:`prune`'s and the pruner's (``fllops=0.5``: did you mean ``flops``?), instead
    of the pruner constructor's bare ``TypeError``."""
    kind = pruner if isinstance(pruner, str) else dict(pruner).get('type')
    cls = PRUNERS.get(kind) if isinstance(kind, str) else kind
    accepted = keyword_parameters(cls, through_bases=True) if isinstance(cls, type) \
        else None
    if accepted is None:
        return
    for key in pruner_kwargs:
        if key not in accepted:
            close = difflib.get_close_matches(key, list(PRUNE_DEFAULTS) + accepted, n=1)
            raise TypeError(f'{caller}: unexpected argument {key!r}' +
                            (f' (did you mean {close[0]!r}?)' if close else ''))


def _pruner_cfg(pruner: Union[str, dict], budget: Dict[str, float], options: Dict[str, Any],
                given: Set[str], pruner_kwargs: Dict[str, Any]) -> dict:
    """The pruner's config: the call's budget and the options it gives (``given``) over
    an ``ImportancePruner``'s own, its defaults under them; a ratio for a pruner that
    ranks channels its own way."""
    cfg = dict(type=pruner) if isinstance(pruner, str) else dict(pruner)
    cfg.update(pruner_kwargs)
    if _builds_importance_pruner(cfg):
        for key, value in options.items():
            if key in given:
                cfg[key] = value
            else:
                cfg.setdefault(key, value)
        if budget:
            for key in _BUDGET_KEYS:
                cfg.pop(key, None)
            cfg.update(budget)
        return cfg
    if (options['importance'] != 'l1' or options['global_ranking']
            or options['sensitivity'] is not False):
        raise ValueError(f'pruner {cfg["type"]!r} ranks channels its own way; importance=, '
                         'global_ranking= and sensitivity= need an ImportancePruner (the '
                         'default pruner)')
    if 'latency' in budget:
        raise ValueError(f'pruner {cfg["type"]!r}: a latency budget needs an ImportancePruner '
                         '(the default pruner)')
    if 'ratio' not in cfg and 'ratios' not in cfg:
        cfg['ratios'] = (budget.get('ratio', 0.5), )
    return cfg


def _builds_importance_pruner(cfg: dict) -> bool:
    """Whether the pruner config ``cfg`` builds an ``ImportancePruner``: one that takes the
    call's importance, allocation and runtime options."""
    cls = PRUNERS.get(cfg['type']) if isinstance(cfg.get('type'), str) else cfg.get('type')
    return isinstance(cls, type) and issubclass(cls, ImportancePruner)


def _check_runtime(runtime: Any, cfg: dict, caller: str) -> None:
    """Refuse a runtime that is not one, whatever the budget: a misspelt name or config key
    given with ``flops=`` would otherwise pass unseen, and fail only once the budget
    becomes a latency.  A name or config dict is checked without building the runtime
    (nothing is timed, a ``'cuda'`` one is checked without a GPU), once: by the
    ``ImportancePruner`` of ``cfg`` when it is built (before the model is copied), else
    here, the pruner taking no runtime.  A ready ``SubnetLatency`` is refused: it slices
    and times its own pruner on its own inputs, and the pruner here is built from a copy
    of the model."""
    if not isinstance(runtime, (Runtime, SubnetLatency)) and not _builds_importance_pruner(cfg):
        check_runtime(runtime)
    if isinstance(runtime, SubnetLatency):
        raise ValueError(f'{caller}: the runtime is a SubnetLatency, which times the subnets of '
                         'the pruner it was built with, not those of the pruner built here; '
                         "pass the Runtime it measures on (runtime=timer.runtime, 'torch', "
                         'a config dict or a Runtime instance)')


def _choose_subnet(pruner: StructurePruner, budget: Dict[str, float], options: Dict[str, Any],
                   example_inputs: Any, data: Any, loss_fn: Any,
                   dense: Optional[Complexity] = None
                   ) -> Tuple[SubnetDict, Optional[Complexity]]:
    """The subnet to slim to: allocated to the budget, or sampled from the pruner's
    ratios when its config holds several and the call gives no budget; with the dense
    model's complexity where the allocation counted it (or ``dense``, counted already
    by :func:`_refuse_unreachable`)."""
    if isinstance(pruner, ImportancePruner):
        if not pruner.has_budget and len(pruner.ratios) > 1:
            if pruner.importance.needs_data:
                pruner.score(data, loss_fn)
            return pruner.sample_subnet(), None
        allocation = pruner.allocate(data, loss_fn)
        if allocation.unscored:
            warn_at_caller(f'{pruner.importance!r} scores no channel of '
                           f'{", ".join(allocation.unscored)}: kept whole', UserWarning)
        return allocation.subnet, allocation.dense
    if not budget and len(pruner.ratios) > 1:
        return _fitted(pruner, pruner.sample_subnet(),
                       WidthRule(options['round_to'], options['max_ratio'])), None
    if not budget:
        budget = {'ratio': pruner.ratios[0]}
    allocation = allocate(pruner, None, **budget, round_to=options['round_to'],
                          max_ratio=options['max_ratio'], example_inputs=example_inputs,
                          dense=dense)
    return allocation.subnet, allocation.dense


def _refuse_unreachable(pruner: StructurePruner, budget: Dict[str, float],
                        options: Dict[str, Any], example_inputs: Any
                        ) -> Optional[Complexity]:
    """Refuse the pruner's budget where the width rules cannot meet it, whatever the
    scores (:func:`~razorlib.pruning.allocation.refuse_unreachable`), before ``data=`` is
    read into a list for the scores and the norms' re-estimation: a generator would come
    back spent.  An ``ImportancePruner`` checks its own budget and rules (its config's
    where the call gives none) and keeps what it counted for its allocation; another
    pruner allocates the call's budget under the call's rules, as :func:`_choose_subnet`
    does, which is given the dense model's complexity returned here."""
    if isinstance(pruner, ImportancePruner):
        pruner.check_budget()
        return None
    budget = {k: v for k, v in budget.items() if k != 'ratio' and v is not None}
    if not budget:
        return None
    return refuse_unreachable(pruner, WidthRule(options['round_to'], options['max_ratio']),
                              **budget, example_inputs=example_inputs)


def _fitted(pruner: StructurePruner, subnet: SubnetDict, rule: WidthRule) -> SubnetDict:
    """``subnet`` with each space's kept count the one ``rule`` allows nearest it, the
    pruner's order deciding which channels: a ``StructurePruner`` samples its ratios
    knowing no ``round_to`` or ``max_ratio`` (an ``ImportancePruner`` holds its own rule)."""
    groups = pruner.groups.prunable
    return pruner.subnet_keeping(subnet, {gid: rule.fit(groups[gid], int(mask.sum()))
                                          for gid, mask in subnet.items()})


def _meets_budget(pruner: StructurePruner, budget: Dict[str, float], example_inputs: Any,
                  dense: Optional[Complexity] = None) -> Optional[Callable[[SubnetDict], bool]]:
    """Whether a subnet keeps the budget's FLOPs or params, measured as the allocation
    measures them (None for a budget of channels or latency); ``dense`` the dense model's
    complexity if the allocation counted it already."""
    metric = next((m for m in ('flops', 'params') if m in budget), None)
    if metric is None:
        return None
    meter = SubnetMeter(pruner, example_inputs)
    counts_flops = metric == 'flops'
    if dense is None:
        full = {gid: np.ones(g.num_channels, dtype=bool)
                for gid, g in pruner.groups.prunable.items()}
        dense = meter(full, counts_flops)
    limit = within(budget[metric], getattr(dense, metric))
    return lambda subnet: getattr(meter(subnet, counts_flops), metric) <= limit


def _check_runs(slim: nn.Module, example_inputs: Any) -> None:
    """Run the slim model once; a failure names the innermost module whose forward was
    running (entered, not left) when it raised."""
    running: List[str] = []

    def enter(name: str) -> Callable:
        def hook(module: nn.Module, args: Any) -> None:
            running.append(name)
        return hook

    def leave(module: nn.Module, args: Any, output: Any) -> None:
        running.pop()

    handles = [hook for name, module in slim.named_modules()
               for hook in (module.register_forward_pre_hook(enter(name)),
                            module.register_forward_hook(leave))]
    try:
        with evaluating(slim), torch.no_grad():
            call_model(slim, example_inputs)
    except RuntimeError as err:
        where = f' in {running[-1]!r} ({type(slim.get_submodule(running[-1])).__name__})' \
            if running and running[-1] else ''
        raise RuntimeError(f'the pruned model does not run{where}: {err}. Its code probably '
                           'hard-codes a channel count; exclude the module with '
                           'except_start_keys') from err
    finally:
        for handle in handles:
            handle.remove()


def _warn_if_nothing_pruned(pruner: StructurePruner, subnet: SubnetDict,
                            budget: Dict[str, float], caller: str) -> None:
    """Say so when a budget below the whole model still keeps every channel: the width
    rules (``round_to`` wider than the layers, ``max_ratio=0``) or frozen groups."""
    if any(value < 1 for value in budget.values()) or not budget:
        if all(bool(torch.as_tensor(mask).all()) for mask in subnet.values()):
            rules = {k: getattr(getattr(pruner, 'rule', None), k, None)
                     for k in ('round_to', 'max_ratio')}
            said = ', '.join(f'{k}={v}' for k, v in rules.items() if v not in (None, 1))
            warn_at_caller(f'{caller}: nothing was pruned: every channel is kept '
                           f'({said or _why_nothing_prunes(pruner)}); the model is returned '
                           'whole', UserWarning)


def _why_nothing_prunes(pruner: StructurePruner) -> str:
    """Why no group of ``pruner`` can lose a channel: the reasons that froze its groups of
    several channels (those of a model output left out: every model has them), or, where
    none did, the layers of a known kind that no group holds (a layer whose weight is
    computed, as ``weight_norm``'s, is never pruned)."""
    if pruner.groups.prunable:
        return 'no prunable group can lose a channel'
    reasons: Dict[str, List[str]] = {}
    for gid, group in pruner.groups.groups.items():
        for reason in group.frozen_reasons:
            if group.num_channels > 1 and reason.kind != 'output':
                reasons.setdefault(str(reason), []).append(gid)
    if reasons:
        (first, ids), *rest = reasons.items()
        more = (f'; and {len(rest)} more reason(s), which pruner.groups.report() lists after '
                'pruner.prepare_from_supernet') if rest else ''
        return f'no group can be pruned: {", ".join(ids)} frozen by {first}{more}'
    held = {name for group in pruner.groups.groups.values() for name in group.layers}
    loose = [f'{name} ({type(module).__name__})' for name, module in pruner.model.named_modules()
             if name not in held and pruner.kinds.kind_of(module) is not None]
    return ('no group can be pruned' + (
        f': no channel group holds {", ".join(loose[:3])}' +
        (f' and {len(loose) - 3} more' if len(loose) > 3 else '') +
        ' (a layer whose weight is computed, as by weight_norm, is not pruned)'
        if loose else ''))


def _warn_norm_statistics(pruner: StructurePruner, subnet: SubnetDict, caller: str,
                          hidden: Sequence[str] = ()) -> None:
    """Say so when a group loses channels that a norm takes its statistics over (a
    LayerNorm, RMSNorm or GroupNorm across them: OLMo-2's ``q_norm`` over every head):
    the slim norm normalises over fewer channels, so the slim model computes what the
    masked one does, not the dense model with those channels removed.  Groups of the
    hidden size (``hidden``: the modules that start it) have their own warning."""
    modules = dict(pruner.model.named_modules())
    found = []
    for gid, keep in subnet.items():
        group = pruner.groups.prunable.get(gid)
        if group is None or bool(torch.as_tensor(keep).all()) or any(
                layer.startswith(key) for layer in group.layers for key in hidden):
            continue
        kinds = {name: pruner.kinds.kind_of(modules[name]) for name in group.norms}
        spanning = [name for name, kind in kinds.items()
                    if kind is not None and not getattr(kind, 'per_channel_statistics', True)]
        if spanning:
            found.append(f'{gid} -> {spanning[0]} ({type(modules[spanning[0]]).__name__})')
    if found:
        more = f' (and {len(found) - 1} more)' if len(found) > 1 else ''
        warn_at_caller(f'{caller}: pruned channels that a norm takes its statistics over, '
                       f'{found[0]}{more}: the slim norm normalises over fewer channels, so '
                       'the slim model computes what the masked supernet does, not the dense '
                       'model with those channels removed; fine-tune it, or keep the group '
                       'with except_start_keys', UserWarning)


def _warn_unpruned(reasons: Dict[str, List[str]]) -> None:
    """One warning, one line per reason, for the groups strict=True would have refused
    (attributed to the caller of :func:`prune` or of the HF integration's ``prune``,
    two frames above :func:`slim_copy`)."""
    if not reasons:
        return
    lines = [f'  {reason} (left unpruned: {", ".join(ids)})' for reason, ids in reasons.items()]
    unknown = any(reason.startswith('[unknown-op]') for reason in reasons)
    hint = '\nAdd a rule for an unknown op (docs/tracing_rules.md) to prune through it.' \
        if unknown else ''
    warn_at_caller('razorlib.prune left some layers unpruned; strict=True raises instead:\n'
                   + '\n'.join(lines) + hint, UserWarning)
