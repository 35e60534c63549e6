"""StructurePruner: trace a supernet, expose its channel spaces, mask and deploy subnets.

The API follows mmrazor's StructurePruner: ``prepare_from_supernet`` traces the model and
injects ``in_mask``/``out_mask`` buffers; a *subnet dict* maps each space id (the name of
a group's leader layer) to a boolean keep-mask over the group's channels; ``set_subnet``
writes it into the masks; ``export_subnet`` turns it into a :class:`ChannelConfig`;
``deploy_subnet`` slices a model to a channel config.
"""
import difflib
import math
import random
from abc import ABCMeta, abstractmethod
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn as nn

from ..layers import KindTable, LayerKindsArg, as_table, param_mask_name
from ..tracing import ChannelGroup, ChannelGroups, build_groups, trace
from ..tracing.context import check_gqa, check_heads
from ..tracing.forward import call_model, default_example_inputs, flatten_tensors, \
    shadow_tensors, shadowed
from ..utils.caller import warn_at_caller
from ..utils.errors import first_line
from .channel_config import ChannelConfig, ChannelSelection, as_channel_config
from .config_check import check_channel_config
from .masks import IN_MASK, OUT_MASK, _is_ours, add_masks, add_param_mask, remove_masks, \
    set_mask
from .slicing import plan_slices, slim_model
from .subnet_config import subnet_channel_config
from .verify import bisect_failing, freeze_failing, freeze_unrunnable_groups

SubnetDict = Dict[str, torch.Tensor]


def _describe(axes: Optional[Dict[str, ChannelSelection]], indices: bool = False) -> str:
    """``'in 3/16, out 5/32'`` for a module's kept channels (with ``indices``, ``'out
    [0, 1, 4]'``); ``'no entry'`` for None."""
    if axes is None:
        return 'no entry'
    if indices:
        return ', '.join(f'{axis} {list(sel.index)}' for axis, sel in sorted(axes.items()))
    return ', '.join(f'{axis} {sel.count}/{sel.raw}' for axis, sel in sorted(axes.items()))


def _check_except_keys(model: nn.Module, keys: Sequence[str]) -> None:
    """Warn about an ``except_start_keys`` prefix that starts no module or parameter name:
    a typo would otherwise leave the layers it meant to keep free to be pruned, without a
    word.  A warning, not an error: one config's keys may serve several models.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter('always')
        ...     _check_except_keys(nn.Sequential(nn.Linear(2, 2)), ('0.', 'head'))
        >>> print(caught[0].message)
        except_start_keys: 'head' starts no module or parameter name of the Sequential, ...
    """
    names = [name for name, _ in model.named_modules() if name]
    names += [name for name, _ in model.named_parameters()]
    for key in keys:
        if not any(name.startswith(key) for name in names):
            close = difflib.get_close_matches(key, names, n=3, cutoff=0.6) or names[:2]
            warn_at_caller(f'except_start_keys: {key!r} starts no module or parameter name of '
                           f'the {type(model).__name__}, so it excludes nothing (names such as '
                           f'{", ".join(repr(n) for n in close)})', UserWarning)


#: Why a group read by a slice at the code's bounds is frozen (``groups.sliced``).
_SLICED = 'a slice of these channels takes them at bounds the code computes'

#: Why a group whose channels reach code that may size them by hand, or read them outside
#: autograd, is frozen when its slim outputs differ (``groups.size_dependent``).
_SIZED = ('the model code sizes these channels by hand or reads them outside autograd '
          '(a view, split or norm of sizes of its own, a size it read, detach, no_grad)')


def _every_other(count: int) -> np.ndarray:
    """``count`` channel indices, the odd ones first: halving a group by this order keeps
    every other channel, which a slice at a literal bound cannot read by chance.

    Example:
        >>> _every_other(5).tolist()
        [1, 3, 0, 2, 4]
    """
    return np.r_[1:count:2, 0:count:2]


def _last_first(count: int) -> np.ndarray:
    """``count`` channel indices, the last first: halving a group by this order keeps its
    second half, and the first slice of it only the channel ``keep_best`` gives it.

    Example:
        >>> _last_first(4).tolist()
        [3, 2, 1, 0]
    """
    return np.arange(count)[::-1].copy()


class StructurePruner(metaclass=ABCMeta):
    """Base class of structured channel pruners.

    Args:
        ratios: the width ratio a subnet keeps per space, or a sequence of ratios to
            sample from, each in (0, 1].  ``ratio=`` is the same argument.
        except_start_keys: module-name prefixes whose output channels are never pruned.
        strict: raise on an op or shape the tracer cannot prune through, instead of
            freezing the channels that reach it.
        verify: run the model once, shape-only, with the groups whose channels reach
            code that may size them by hand pruned, and freeze those whose pruning the
            code cannot follow (``pruning/verify.py``); on real weights, also run those
            that ran masked and sliced, and freeze those whose outputs differ.
        layer_kinds: layer kinds for this pruner only, over the registered ones
            (:mod:`razorlib.layers`): tracing, masks and slicing all use them.
        gqa: what grouped-query attention prunes: ``'kv'`` (default) a key/value head
            with all its query heads; ``'query'`` the same query heads in every key/value
            group, every key/value head kept (32 query / 8 kv heads at ratio 0.5: 16 / 8).
        heads: what attention prunes: ``'whole'`` (default) whole heads; ``'width'`` the
            same ``head_dim`` positions of every head (head counts kept, RoPE's pairs
            ``(i, i + d/2)`` and rotary ``inv_freq`` entries with them).  Under
            ``'width'`` the pruner also runs the model once masked and once sliced at half
            width and freezes the groups whose slim outputs differ (code that scales by
            its ``head_dim`` attribute, SDPA without ``scale=``), with the difference as
            the reason.

    Example:
        >>> from razorlib.pruning import L1NormPruner
        >>> pruner = L1NormPruner(ratio=0.5)
        >>> pruner.prepare_from_supernet(model, torch.randn(1, 3, 32, 32))  # doctest: +SKIP
        >>> pruner.set_subnet(pruner.sample_subnet())                        # doctest: +SKIP
        >>> slim = pruner.deploy_subnet(model, pruner.export_subnet())       # doctest: +SKIP
    """

    def __init__(self, ratios: Union[float, Sequence[float], None] = None,
                 except_start_keys: Sequence[str] = (), strict: bool = False,
                 verify: bool = True, layer_kinds: LayerKindsArg = None,
                 ratio: Union[float, Sequence[float], None] = None, gqa: str = 'kv',
                 heads: str = 'whole'):
        if ratios is not None and ratio is not None:
            raise ValueError('give ratios= or ratio= (the same argument), not both')
        ratios = ratio if ratios is None else ratios
        ratios = (1.0, ) if ratios is None else ratios
        ratios = (ratios, ) if isinstance(ratios, (int, float)) else ratios
        ratios = tuple(float(r) for r in ratios)
        if not ratios or any(not 0 < r <= 1 for r in ratios):
            raise ValueError(f'ratios must be in (0, 1], got {ratios}')
        self.ratios = ratios
        self.except_start_keys = tuple([except_start_keys] if isinstance(except_start_keys, str)
                                       else except_start_keys)
        self.strict = strict
        self.verify = verify
        self.gqa = check_gqa(gqa)
        self.heads = check_heads(heads)
        self.kinds: KindTable = as_table(layer_kinds)
        self._deployed = False
        self.groups: Optional[ChannelGroups] = None
        self.model: Optional[nn.Module] = None
        self._subnet: Dict[str, np.ndarray] = {}
        self._masked: Dict[str, nn.Module] = {}

    # ------------------------------------------------------------------ preparation
    def prepare_from_supernet(self, supernet: nn.Module, example_inputs: Any = None) -> None:
        """Trace ``supernet``, build its channel spaces and give its modules masks.

        Groups whose pruning the model's code cannot follow (a reshape or split size
        written in the code) are found by a shape-only run and frozen; on real weights,
        so are those whose slim outputs differ from the masked ones.
        """
        if self.heads == 'width' and any(p.is_meta for p in supernet.parameters()):
            raise ValueError(f"heads='width' compares the slim model with the masked one on "
                             f'real weights; this {type(supernet).__name__} is on the meta '
                             "device: load its weights, or use heads='whole'")
        _check_except_keys(supernet, self.except_start_keys)
        if example_inputs is None:
            example_inputs = default_example_inputs(supernet)
        graph = trace(supernet, example_inputs, self.strict, self.except_start_keys,
                      layer_kinds=self.kinds, gqa=self.gqa, heads=self.heads)
        groups = build_groups(graph)
        relevant = np.zeros(len(groups.labels), dtype=bool)
        for group in groups.prunable.values():
            relevant[group.classes] = True
        uses = [u for u in groups.uses if relevant[groups.labels[u.slots]].any()]
        if self.verify:
            freeze_unrunnable_groups(supernet, groups, uses, example_inputs, self.strict,
                                     kinds=self.kinds)
        self.groups, self.model, self._uses = groups, supernet, uses
        self._deployed = False
        modules = dict(supernet.named_modules())
        self._masked = {}
        for use in uses:
            if use.role == 'param':
                owner, _, attr = use.name.rpartition('.')
                add_param_mask(modules[owner], attr, use.dim)
            elif use.name not in self._masked:
                module = modules[use.name]
                add_masks(module, self.kinds.kind_of(module), graph.out_dims[use.name],
                          use.name)
                self._masked[use.name] = module
        self._reset_subnet()
        checked = list(groups.prunable) if self.heads == 'width' else list(dict.fromkeys(
            groups.whole_heads + groups.summed + groups.sliced +
            (groups.size_dependent if self.verify else [])))
        if any(p.is_meta for p in supernet.parameters()):
            freeze_failing(groups, dict.fromkeys(groups.sliced, 'the model is on the meta '
                                                 'device'), _SLICED + ', which only a run on '
                           'real weights can check ({error})', self.strict,
                           'load the model with real weights')
            self._reset_subnet()
        elif checked:
            if self._freeze_inexact_groups(example_inputs, checked) and self.verify:
                # the size-dependent groups ran cut beside those: now they must run without
                failing = bisect_failing(groups.size_dependent, lambda ids: self._cut_run(
                    ids, example_inputs, compare=False))
                freeze_failing(groups, failing, 'the model code fails when these channels '
                               'are pruned: {error}', self.strict,
                               'except_start_keys to exclude the module')
            self._reset_subnet()  # the groups it froze leave the subnet

    def _reset_subnet(self) -> None:
        """Every prunable group whole."""
        self._subnet = {gid: np.ones(g.num_channels, dtype=bool)
                        for gid, g in self.groups.prunable.items()}

    def _freeze_inexact_groups(self, example_inputs: Any, ids: List[str]) -> Dict[str, str]:
        """Freeze the groups among ``ids`` whose slim model computes something else than
        the masked one: every prunable group under ``heads='width'``, otherwise those read
        as whole heads (``groups.whole_heads``), those a sum adds up over
        (``groups.summed``), those a slice reads (``groups.sliced``) and, with ``verify``,
        those that reach code that may size them by hand (``groups.size_dependent``).

        Shapes cannot tell these apart.  Pruning ``head_dim`` is exact only where the
        code's scale and rotary frequencies follow the slim width: a scale read from the
        ``head_dim`` attribute, SDPA without ``scale=`` or a rotary layout other than
        ``rotate_half``'s would change the outputs silently.  Pruning whole heads is exact
        only where the code splits by the slim head count: ``reshape(B, N, self.h, -1)``
        with a count no ``HEAD_ATTRIBUTES`` entry rewrites splits the slim channels into
        as many narrower heads, without an error.  Dropping a channel from a sum is exact
        only where the masked model's pruned channel is zero there, which an op after the
        layer undoes (``y.exp().sum(1)``, ``sigmoid``, ``+ 1``).  A slice of a channel dim
        (``groups.sliced``) takes the kept channels only where the code computes its
        bounds from the slim widths.  A size-dependent group can run pruned and still
        compute something else: ``view(B, self.k, -1)`` with a literal channel count
        re-splits the slim rows, and a mean over channels taken on ``detach()`` or under
        ``no_grad`` (which autograd does not see) averages the kept channels only.  So the
        model runs on ``example_inputs`` with the groups halved, masked and then sliced (in
        place, put back after), and the groups whose outputs differ are bisected out and
        frozen.  The half kept is every other channel, not a prefix: a literal
        ``x[:, :16]`` of 32 channels reads the same channels of a slim model that kept the
        first 16.  Where a slice reads a group, the run is repeated with its second half
        kept (each slice keeping a channel): bounds in proportion to the width
        (``x[:, :c // 2]``) cut every other channel of 32 where the masked model does,
        and not a lopsided half.  (Models with parameters on the ``meta`` device are not
        run.)

        Returns:
            ``{group id: difference}`` for each group frozen.
        """
        failing = bisect_failing(ids, lambda ids: self._difference(ids, example_inputs))
        heads = failing if self.heads == 'width' else {
            gid: error for gid, error in failing.items() if gid in self.groups.whole_heads}
        rest = {gid: error for gid, error in failing.items() if gid not in heads}
        sliced_ids, summed_ids = set(self.groups.sliced), set(self.groups.summed)
        sliced = {gid: error for gid, error in rest.items() if gid in sliced_ids}
        summed = {gid: error for gid, error in rest.items()
                  if gid not in sliced and gid in summed_ids}
        sized = {gid: error for gid, error in rest.items()
                 if gid not in sliced and gid not in summed}
        instead = "heads='whole'" if self.heads == 'width' else (
            'view by -1 heads, or register a HEAD_ATTRIBUTES entry that rewrites the head '
            'count from the projections, or except_start_keys to exclude the module')
        differs = 'the slim model computes other outputs than the masked one ({error})'
        freeze_failing(self.groups, heads, f'heads={self.heads!r}: {differs}', self.strict,
                       instead)
        freeze_failing(self.groups, sliced, f'{differs}: {_SLICED}', self.strict,
                       'compute the bounds from the widths, or except_start_keys to exclude '
                       'the module')
        freeze_failing(self.groups, summed, f'{differs}: a sum over these channels reads them '
                       'where pruning leaves them non-zero', self.strict,
                       'except_start_keys to exclude the module')
        freeze_failing(self.groups, sized, f'{differs}: {_SIZED}', self.strict,
                       'size them from the tensors (-1, x.shape), or except_start_keys to '
                       'exclude the module')
        return failing

    def _difference(self, ids: List[str], example_inputs: Any) -> Optional[str]:
        """How the slim model's outputs differ from the masked model's with ``ids``
        halved (every other channel; then, where a slice reads one of them, the second
        half), or None where they agree."""
        found = self._cut_run(ids, example_inputs, compare=True)
        if found is None and not set(ids).isdisjoint(self.groups.sliced):
            found = self._cut_run(ids, example_inputs, compare=True, order=_last_first)
        return found

    def _cut_run(self, ids: List[str], example_inputs: Any, compare: bool,
                 order: Callable[[int], np.ndarray] = _every_other) -> Optional[str]:
        """Run the slim model with ``ids`` halved (their channels kept in ``order``): its
        error, or (``compare``) how its outputs differ from the masked model's; None
        where it runs (and agrees)."""
        groups = self.groups.groups
        self.set_subnet({gid: groups[gid].keep_best(order(groups[gid].num_channels),
                                                    groups[gid].num_channels // 2)
                         for gid in ids})
        cfg = self.export_subnet()
        try:
            masked = _outputs(self.model, example_inputs, lambda: None) if compare else None
            slim = _outputs(self.model, example_inputs,
                            lambda: _slice_unmasked(self.model, cfg, self.kinds))
        except Exception as err:  # pylint: disable=broad-except  # the code cannot follow
            return first_line(err)
        finally:
            self.set_subnet({})
        return _output_difference(masked, slim) if compare else None

    def _require_prepared(self) -> ChannelGroups:
        if self.groups is None:
            if self._deployed:
                raise RuntimeError(
                    'this pruner was consumed by deploy_subnet(): its model is sliced and its '
                    'spaces no longer describe it; call prepare_from_supernet(model) on the '
                    'slim model to prune it again')
            raise RuntimeError('call prepare_from_supernet(model) first')
        return self.groups

    @property
    def channel_spaces(self) -> Dict[str, torch.Tensor]:
        """Each prunable space id with an all-ones mask of its channels."""
        groups = self._require_prepared()
        return {gid: torch.ones(g.num_channels, dtype=torch.bool)
                for gid, g in groups.prunable.items()}

    def get_space_id(self, module_name: str) -> Optional[str]:
        """The space whose channels ``module_name`` outputs (layers, norms), or None."""
        for gid, group in self._require_prepared().prunable.items():
            if module_name in group.layers or module_name in group.norms:
                return gid
        return None

    # ------------------------------------------------------------------ subnets
    @abstractmethod
    def channel_orders(self) -> Dict[str, np.ndarray]:
        """Per prunable space, its channel indices, most worth keeping first."""

    @staticmethod
    def keep_ratio(group: ChannelGroup, ratio: float, order: np.ndarray) -> torch.Tensor:
        """Keep-mask of the first ``ratio * channels`` of ``order``, rounded half up (as
        ``WidthRule.fit`` rounds: half of 5 keeps 3) and at least 1, with a channel of each
        layer and chunk input in the group (``keep_best``)."""
        count = max(1, math.floor(round(ratio * group.num_channels, 9) + 0.5))
        return torch.from_numpy(group.keep_best(np.asarray(order), count))

    def subnet_at(self, ratios: Union[float, Mapping[str, float]]) -> SubnetDict:
        """The subnet keeping ``ratios`` of each space's channels, best channels first.

        Args:
            ratios: one ratio for every space (a uniform-width subnet), or per space id.
        """
        groups = self._require_prepared().prunable
        if not isinstance(ratios, Mapping):
            ratios = {gid: float(ratios) for gid in groups}
        orders = self.channel_orders()
        return {gid: self.keep_ratio(groups[gid], ratio, orders[gid])
                for gid, ratio in ratios.items()}

    def subnet_keeping(self, subnet: SubnetDict, counts: Mapping[str, int],
                       orders: Optional[Mapping[str, np.ndarray]] = None) -> SubnetDict:
        """``subnet`` with each space of ``counts`` keeping that many channels, its best by
        ``orders`` (default :meth:`channel_orders`; pass them to reuse across calls), with
        a channel of each layer and chunk input in the group (``keep_best``)."""
        groups = self._require_prepared().prunable
        orders = self.channel_orders() if orders is None else orders
        return {**subnet, **{gid: torch.from_numpy(groups[gid].keep_best(
            np.asarray(orders[gid]), int(count))) for gid, count in counts.items()}}

    def sample_subnet(self, rng: Optional[random.Random] = None) -> SubnetDict:
        """A random subnet: per space a ratio drawn from ``ratios``.

        Args:
            rng: the generator to draw from; default Python's global ``random``.  A
                generator seeded alike on every process samples the same subnet on each.
        """
        draw = (rng or random).choice
        return self.subnet_at({gid: draw(self.ratios)
                               for gid in self._require_prepared().prunable})

    def set_max_channel(self) -> None:
        self.set_subnet(self.subnet_at(1.0))

    def set_min_channel(self) -> None:
        self.set_subnet(self.subnet_at(min(self.ratios)))

    def get_max_channel_bins(self, max_channel_bins: int) -> Dict[str, torch.Tensor]:
        """Per space, ``max_channel_bins`` ones: the bins AutoSlim's greedy search drops."""
        return {gid: torch.ones(max_channel_bins)
                for gid in self._require_prepared().prunable}

    def set_channel_bins(self, channel_bins_dict: Mapping[str, torch.Tensor],
                         max_channel_bins: int) -> None:
        """Keep ``sum(bins) / max_channel_bins`` of each space's channels."""
        self.set_subnet(self.subnet_at({gid: float(bins.sum()) / max_channel_bins
                                        for gid, bins in channel_bins_dict.items()}))

    def set_subnet(self, subnet_dict: Mapping[str, Any]) -> None:
        """Write a subnet into the masks; spaces it does not name keep every channel.

        Raises:
            ValueError: an unknown space id, a mask of the wrong length, a mask that
                prunes every channel, or a mask that splits channels bound together
                (by a group conv, a chunk, ...).  Nothing is changed then.
        """
        keep = self._validate(subnet_dict)
        groups = self._require_prepared()
        masks = groups.use_masks(keep)
        modules = dict(self.model.named_modules())
        for use in self._uses:
            mask = torch.from_numpy(masks[(use.name, use.role, use.dim)])
            if use.role == 'param':
                owner, _, attr = use.name.rpartition('.')
                set_mask(modules[owner], param_mask_name(attr, use.dim), mask)
            else:
                set_mask(self._masked[use.name], IN_MASK if use.role == 'in' else OUT_MASK,
                         mask)
        self._subnet = keep

    def subnet_from_channel_config(
            self, channel_cfg: Union[ChannelConfig, Dict[str, Any], str, Path]) -> SubnetDict:
        """The subnet dict whose :meth:`export_subnet` is ``channel_cfg``.

        Each space keeps the channels its layers keep at their outputs in the config (all
        of them where the config names none of its layers); a space whose leader writes
        only some of its channels (a concat feeding a product) is read from every layer.

        Raises:
            ValueError: the config is not a subnet of this supernet; the message names
                the first module entry (``modules.<name>``) at fault.
        """
        cfg = as_channel_config(channel_cfg)
        outputs = {}
        for use in self._uses:
            selection = cfg.kept(use.name, 'out') if use.role == 'out' else None
            if selection is None:
                continue
            if selection.raw != use.slots.size:
                raise ValueError(f'modules.{use.name}: raw_out_channels is {selection.raw}, '
                                 f'the supernet layer has {use.slots.size}')
            outputs[use.name] = np.zeros(use.slots.size, dtype=bool)
            outputs[use.name][list(selection.index)] = True
        subnet = {gid: torch.from_numpy(keep) for gid, keep in self._keep_of(outputs).items()}
        try:
            keep = self._validate(subnet)
        except ValueError as err:
            raise ValueError(f'channel config: {err}') from err
        exported = subnet_channel_config(self.groups, self._uses, keep)
        for name in sorted(set(cfg.modules) | set(exported.modules)):
            given, expected = cfg.modules.get(name), exported.modules.get(name)
            if given != expected:
                said, wanted = _describe(given), _describe(expected)
                if said == wanted:  # as many channels, other ones
                    said, wanted = _describe(given, True), _describe(expected, True)
                raise ValueError(f'modules.{name}: the channel config keeps {said}, the '
                                 f'supernet set to its spaces keeps {wanted}')
        if cfg.params != exported.params:
            name = next(n for n in sorted(set(cfg.params) | set(exported.params))
                        if cfg.params.get(n) != exported.params.get(n))
            raise ValueError(f'params.{name}: the channel config does not match the '
                             'supernet set to its spaces')
        return subnet

    @property
    def current_subnet(self) -> SubnetDict:
        self._adopt_loaded_masks()
        return {gid: torch.from_numpy(keep.copy()) for gid, keep in self._subnet.items()}

    def _keep_of(self, outputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Per prunable group one of whose layers ``outputs`` names: a keep-mask over its
        channels, read from those layers' output keep-masks (layer name -> one bool per
        output channel); the first layer to name a channel decides it (a disagreement is
        for the caller to find), a channel none names is kept.  Every layer is read, not
        only the leader: a leader may write only some of its group's channels (a concat
        feeding a product)."""
        groups = self._require_prepared()
        class_keep: Dict[int, bool] = {}
        for use in self._uses:
            if use.role == 'out' and use.name in outputs:
                for label, value in zip(groups.labels[use.slots].tolist(),
                                        outputs[use.name].tolist()):
                    class_keep.setdefault(label, value)
        keep = {}
        for gid, group in groups.prunable.items():
            values = [class_keep.get(label) for label in group.classes.tolist()]
            if any(value is not None for value in values):
                keep[gid] = np.array([value is not False for value in values])
        return keep

    def _masks_now(self) -> Dict[tuple, np.ndarray]:
        """Each use's keep-mask as the model's mask buffers hold it now."""
        modules = dict(self.model.named_modules())
        masks = {}
        for use in self._uses:
            if use.role == 'param':
                owner, _, attr = use.name.rpartition('.')
                buffer = modules[owner]._buffers[param_mask_name(attr, use.dim)]
            else:
                buffer = self._masked[use.name]._buffers[IN_MASK if use.role == 'in' else OUT_MASK]
            masks[(use.name, use.role, use.dim)] = (buffer.detach().reshape(-1).cpu() != 0).numpy()
        return masks

    def _adopt_loaded_masks(self) -> None:
        """Make the subnet the one the model's masks hold when they changed behind the
        pruner's back: a masked model's ``state_dict`` (masks included) loaded into this
        pruner's model after :meth:`prepare_from_supernet`.

        Raises:
            ValueError: the loaded masks are no subnet of this pruner (one prunes every
                channel of a space, or two layers of a space keep different channels).
        """
        groups = self._require_prepared()
        now = self._masks_now()
        if all(np.array_equal(now[key], mask)
               for key, mask in groups.use_masks(self._subnet).items() if key in now):
            return
        subnet = self._keep_of({use.name: now[(use.name, use.role, use.dim)]
                                for use in self._uses if use.role == 'out'})
        try:
            keep = self._validate(subnet)
        except ValueError as err:
            raise ValueError(f"the model's masks (loaded from a state_dict?) are no subnet of "
                             f'this pruner: {err}') from err
        wrong = next((key for key, mask in groups.use_masks(keep).items()
                      if key in now and not np.array_equal(now[key], mask)), None)
        if wrong is not None:
            raise ValueError(f"the model's masks (loaded from a state_dict?) are no subnet of "
                             f'this pruner: the {wrong[1]} mask of {wrong[0]} disagrees with '
                             'the output masks of its space')
        self._subnet = keep

    def _validate(self, subnet_dict: Mapping[str, Any]) -> Dict[str, np.ndarray]:
        groups = self._require_prepared()
        prunable = groups.prunable
        if not isinstance(subnet_dict, Mapping):
            raise TypeError(f'a subnet dict maps space ids to masks, got {type(subnet_dict)}')
        unknown = [k for k in subnet_dict if k not in prunable]
        if unknown:
            hint = ' (it is frozen)' if unknown[0] in groups.groups else ''
            raise ValueError(f'subnet dict names unknown space id {unknown[0]!r}{hint}; '
                             f'prunable spaces are e.g. {list(prunable)[:5]}')
        keep = {gid: np.ones(g.num_channels, dtype=bool) for gid, g in prunable.items()}
        for gid, mask in subnet_dict.items():
            keep[gid] = self._space_mask(prunable[gid], mask)
        groups.check_keep(keep)
        return keep

    def _space_mask(self, group: ChannelGroup, mask: Any) -> np.ndarray:
        values = (torch.as_tensor(mask).detach().cpu().reshape(-1) != 0).numpy()
        if values.size == group.num_channels:
            keep = values
        elif values.size == group.width:
            keep = self._from_leader_positions(group, values)
        else:
            extra = (f' (or {group.width}, one per output channel of {group.id})'
                     if group.width != group.num_channels else '')
            raise ValueError(f'space {group.id!r}: mask has {values.size} entries, expected '
                             f'{group.num_channels}{extra}')
        if not keep.any():
            raise ValueError(f'space {group.id!r}: the mask prunes every channel; a subnet '
                             'must keep at least one channel per space')
        return keep

    def _from_leader_positions(self, group: ChannelGroup, values: np.ndarray) -> np.ndarray:
        """The group's keep-mask from ``values``, one per output channel of its leader.

        Raises:
            ValueError: ``values`` prunes a channel the group keeps whole
                (``group.kept``), or keeps one and prunes another of the same class.
        """
        index = np.full(len(self.groups.labels), -1, dtype=np.int64)
        index[group.classes] = np.arange(group.num_channels)
        cls = index[group.positions]
        whole = np.nonzero((cls < 0) & ~values)[0]  # no channel of the group: kept
        if whole.size:
            why = '; '.join(str(r) for r in group.kept_reasons)
            raise ValueError(f'space {group.id!r}: the mask prunes channel {whole[0]}, which '
                             f'is always kept ({why}); keep it')
        free = cls >= 0
        any_kept = np.zeros(group.num_channels, dtype=bool)
        all_kept = np.ones(group.num_channels, dtype=bool)
        np.logical_or.at(any_kept, cls[free], values[free])
        np.logical_and.at(all_kept, cls[free], values[free])
        split = np.nonzero(any_kept != all_kept)[0]
        if split.size:
            positions = np.nonzero(cls == split[0])[0]
            kept = positions[values[positions]][0]
            dropped = positions[~values[positions]][0]
            source = [s for s in self.groups.graph.slots.sources if s.name == group.id][0]
            slots = np.array([source.start + kept, source.start + dropped])
            why = '; '.join(self.groups.graph.slots.binding_reasons(slots)) or 'bound together'
            raise ValueError(f'space {group.id!r}: the mask keeps channel {kept} but prunes '
                             f'channel {dropped}, which must be kept or pruned together: {why}')
        return all_kept

    # ------------------------------------------------------------------ export / deploy
    def export_subnet(self) -> ChannelConfig:
        """The current subnet as a :class:`ChannelConfig` (kept indices per module): the
        one the model's masks hold, also after a masked ``state_dict`` was loaded."""
        self._adopt_loaded_masks()
        return subnet_channel_config(self._require_prepared(), self._uses, self._subnet)

    def deploy_subnet(self, supernet: nn.Module,
                      channel_cfg: Union[ChannelConfig, Dict[str, Any], str, Path],
                      example_inputs: Any = None) -> nn.Module:
        """Slice ``supernet`` (in place) to ``channel_cfg`` and return it.

        Works on the masked supernet or on a freshly built model of the same
        architecture.  The config is first checked, before anything is sliced: while the
        pruner is prepared, against its traced groups
        (:meth:`subnet_from_channel_config`): a config whose modules disagree within a
        group, that leaves out a module a kept subnet slices, or that prunes a frozen
        group (a classifier's outputs) is refused, naming the module.  A pruner not
        prepared (a new one, given a freshly built model and a saved config) traces
        ``supernet`` on ``example_inputs`` (default a random 1x3x224x224 image) for
        the same check
        (:func:`~razorlib.pruning.config_check.check_channel_config`; a model that
        cannot be traced on them is checked against its layer widths only, with a
        warning): the channels a forward binds kept alike, else the slim model would
        compute something else without a word.  Deploying the pruner's own supernet
        consumes the pruner: its spaces no longer describe the model, and reading them
        raises an error that says so.
        """
        named = channel_cfg if isinstance(channel_cfg, (str, Path)) else None
        channel_cfg = as_channel_config(channel_cfg)
        try:
            if self.groups is not None:
                self.subnet_from_channel_config(channel_cfg)
            else:
                check_channel_config(
                    supernet, channel_cfg, example_inputs, layer_kinds=self.kinds,
                    who=f'{type(self).__name__}.deploy_subnet',
                    retry='pass example_inputs= it runs on',
                    inputs_said='a random 1x3x224x224 image' if example_inputs is None
                    else 'the example inputs')
        except ValueError as err:
            if named is None:
                raise
            raise ValueError(f'{named}: {err}') from err
        model = slim_model(supernet, channel_cfg, self.kinds)
        if model is self.model:
            self.groups, self.model, self._masked, self._subnet = None, None, {}, {}
            self._deployed = True
        return model

    def remove_masks(self) -> None:
        """Take the masks out of the prepared model: it computes as before."""
        if self.model is not None:
            remove_masks(self.model)
        self.groups, self.model, self._masked, self._subnet = None, None, {}, {}


def _slice_unmasked(model: nn.Module, cfg: ChannelConfig, kinds: KindTable) -> None:
    """Slice ``model`` to ``cfg``, its mask hooks taken out
    (new hook tables: :func:`~razorlib.tracing.forward.shadowed` puts the old ones back)."""
    for module in model.modules():
        for attr in ('_forward_pre_hooks', '_forward_hooks'):
            hooks = getattr(module, attr)
            if any(_is_ours(hook) for hook in hooks.values()):
                setattr(module, attr, type(hooks)((key, hook) for key, hook in hooks.items()
                                                  if not _is_ours(hook)))
    for module, plan in plan_slices(model, cfg, kinds):
        plan.apply(module)


def _outputs(model: nn.Module, example_inputs: Any, change) -> List[torch.Tensor]:
    """The floating outputs of ``model`` in eval mode after ``change()``, on stand-ins of
    its tensors (16-bit floats as float32, so that rounding hides no difference): the
    model, its tensors and its modes are as before afterwards."""
    shadows = {name: _float32(t) for name, t in shadow_tensors(model, meta=False).items()}
    with shadowed(model, shadows), torch.no_grad():
        change()
        model.eval()
        out = call_model(model, _float32(example_inputs))
        return [t.detach() for t in flatten_tensors(out) if t.is_floating_point()]


def _float32(obj: Any) -> Any:
    """16-bit float tensors of a nested mapping/list/tuple as float32."""
    if isinstance(obj, torch.Tensor):
        return obj.float() if obj.is_floating_point() and obj.element_size() < 4 else obj
    if isinstance(obj, Mapping):
        return {key: _float32(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_float32(value) for value in obj)
    return obj


def _output_difference(masked: List[torch.Tensor], slim: List[torch.Tensor]) -> Optional[str]:
    """The largest relative difference of the outputs where above 1e-4, else None."""
    if [t.shape for t in masked] != [t.shape for t in slim]:
        return 'the outputs have other shapes'
    for a, b in zip(masked, slim):
        a, b = a.double(), b.double()
        error = float((a - b).norm() / a.norm().clamp_min(1e-12))
        if error > 1e-4:
            return f'relative error {error:.2g}'
    return None
