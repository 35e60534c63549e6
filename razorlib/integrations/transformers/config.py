"""Config rewrite: make a pruned Hugging Face model's ``config`` describe its slim widths.

A pruned model keeps its dense ``config``, so ``from_pretrained`` would build the dense
layers and fail on the saved weights' sizes.  :func:`sync_config` finds what the config
must say by building the same class from it on the ``meta`` device (shapes only, no
memory) and comparing every parameter and buffer shape with the slim model's: each
width field (``intermediate_size``, GPT-2's ``n_inner``, ...) and head count
(``num_attention_heads``, ``num_key_value_heads``, ...) whose change makes the shapes
agree is rewritten.  Widths the config cannot write are left in
:attr:`ConfigSync.mismatches`, and :func:`~.reload.save_pruned` saves them as a channel
config: widths that differ across layers, head counts the config class refuses, and the
heads of models whose head width is always ``hidden_size / num_attention_heads`` (BERT,
GPT-2), where fewer heads in the config would mean wider ones.
"""
import copy
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn as nn

from ...tracing.forward import is_transformers_model

__all__ = ['MLP_WIDTH_FIELDS', 'HEAD_COUNT_FIELDS', 'HIDDEN_SIZE_FIELDS', 'WIDTH_FIELDS',
           'HEAD_SHAPE_ATTRIBUTES', 'ConfigSync', 'Mismatch', 'is_hf_model', 'build_like',
           'head_shapes_differ', 'shape_mismatches', 'sync_config']

#: Config fields that size the MLP of every layer, by model family (tried in order).
MLP_WIDTH_FIELDS = ('intermediate_size', 'n_inner', 'ffn_dim', 'd_ff', 'encoder_ffn_dim',
                    'decoder_ffn_dim')
#: Config fields that count attention heads: query heads, then key/value heads (GQA).
HEAD_COUNT_FIELDS = ('num_attention_heads', 'num_key_value_heads', 'n_head', 'num_heads',
                     'n_heads', 'encoder_attention_heads', 'decoder_attention_heads')
#: Config fields that size the hidden size (the residual stream), by model family.
HIDDEN_SIZE_FIELDS = ('hidden_size', 'n_embd', 'd_model')
#: What :func:`sync_config` may rewrite by default.
WIDTH_FIELDS = MLP_WIDTH_FIELDS + HEAD_COUNT_FIELDS + HIDDEN_SIZE_FIELDS


@dataclass(frozen=True)
class Mismatch:
    """A tensor whose shape differs between the slim model and one built from its config
    (``None`` where one of them lacks it)."""
    name: str
    config_shape: Optional[Tuple[int, ...]]
    model_shape: Optional[Tuple[int, ...]]

    def __str__(self) -> str:
        return f'{self.name}: config builds {self.config_shape}, the model has {self.model_shape}'


@dataclass
class ConfigSync:
    """What :func:`sync_config` changed and what the config still cannot describe.

    Args:
        changed: config field -> ``(old value, new value)``.
        mismatches: tensors whose shapes a model built from the new config still gets
            wrong (widths that differ across layers).
    """
    changed: Dict[str, Tuple[object, int]] = field(default_factory=dict)
    mismatches: List[Mismatch] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """Whether ``from_pretrained`` of the config builds exactly the slim shapes."""
        return not self.mismatches


def is_hf_model(model: nn.Module) -> bool:
    """Whether ``model`` is a transformers ``PreTrainedModel`` (without importing
    transformers for a model that is none).

    Example:
        >>> is_hf_model(nn.Linear(2, 2))
        False
    """
    return is_transformers_model(model)


def build_like(model: nn.Module, config=None, device: str = 'meta') -> nn.Module:
    """A fresh model of ``model``'s class built from ``config`` (default its own), on
    ``device``: on ``meta`` it holds shapes only and costs no memory."""
    config = copy.deepcopy(model.config if config is None else config)
    with torch.device(device):
        return type(model)(config)


def _shapes(model: nn.Module) -> Dict[str, Tuple[int, ...]]:
    tensors = list(model.named_parameters(remove_duplicate=False)) + \
        list(model.named_buffers(remove_duplicate=False))
    return {name: tuple(t.shape) for name, t in tensors}


def shape_mismatches(model: nn.Module, reference: nn.Module) -> List[Mismatch]:
    """The tensors whose shapes differ between ``reference`` and ``model``."""
    ref, own = _shapes(reference), _shapes(model)
    return [Mismatch(name, ref.get(name), own.get(name)) for name in sorted(set(ref) | set(own))
            if ref.get(name) != own.get(name)]


def _width_changes(mismatches: Iterable[Mismatch]) -> Dict[int, set]:
    """config size -> the sizes the model has in its place, over every mismatched dim."""
    changes: Dict[int, set] = {}
    for m in mismatches:
        if m.config_shape is None or m.model_shape is None or \
                len(m.config_shape) != len(m.model_shape):
            continue
        for dense, slim in zip(m.config_shape, m.model_shape):
            if dense != slim:
                changes.setdefault(dense, set()).add(slim)
    return changes


def _uniform(changes: Dict[int, set]) -> List[Tuple[int, int]]:
    """``(dense, slim)`` for each size that changed to one new size everywhere."""
    return [(dense, next(iter(slims))) for dense, slims in changes.items() if len(slims) == 1]


def _scaled(old: object, dense: int, slim: int) -> Optional[int]:
    """``old * slim / dense`` where that is a whole, positive count (4 heads, 64 -> 32
    wide: 2)."""
    if isinstance(old, int) and old * slim % dense == 0 and old * slim // dense > 0:
        return old * slim // dense
    return None


def _candidates(old: object, changes: Dict[int, set]) -> List[int]:
    """The values to try for a config field whose value is ``old``, from the sizes that
    changed uniformly: a width's new size (any, for an unset field such as GPT-2's
    ``n_inner``), and ``old`` scaled as a size changed, for a count of fixed-width units
    such as heads.

    Example:
        >>> _candidates(4, {64: {32}, 128: {96}, 32: {16, 8}})
        [2, 3]
        >>> _candidates(128, {64: {32}, 128: {96}})
        [64, 96]
        >>> _candidates(None, {64: {32}})
        [32]
    """
    values = []
    for dense, slim in _uniform(changes):
        if old is None or old == dense:
            values.append(slim)
        scaled = _scaled(old, dense, slim)
        if scaled not in (None, old):
            values.append(scaled)
    return list(dict.fromkeys(values))


def _head_width(config) -> Dict[str, int]:
    """``head_dim`` pinned to the head width the config means, where it does not set one
    (Qwen2, ViT: ``hidden_size // num_attention_heads``), so that fewer heads or a
    smaller hidden size keep the head width in the model classes that read
    ``config.head_dim`` when it is there."""
    if isinstance(getattr(config, 'head_dim', None), int):
        return {}
    hidden = getattr(config, 'hidden_size', None)
    heads = getattr(config, 'num_attention_heads', None)
    if isinstance(hidden, int) and isinstance(heads, int) and heads and hidden % heads == 0:
        return {'head_dim': hidden // heads}
    return {}


def _moves(config, fields: Iterable[str], mismatches: List[Mismatch]) -> List[Dict[str, int]]:
    """Config changes to try: each field alone, then the head counts together by one
    ratio (GQA's query and key/value heads, where a config check wants both at once).
    A change of head counts pins the head width (:func:`_head_width`)."""
    changes = _width_changes(mismatches)
    present = [name for name in fields if hasattr(config, name)]
    moves = [{name: value} for name in present
             for value in _candidates(getattr(config, name), changes)]
    heads = [name for name in present
             if name in HEAD_COUNT_FIELDS and isinstance(getattr(config, name), int)]
    for dense, slim in _uniform(changes) if len(heads) > 1 else ():
        together = {name: _scaled(getattr(config, name), dense, slim) for name in heads}
        if None not in together.values():
            moves.append(together)
    hidden = [name for name in present
              if name in HIDDEN_SIZE_FIELDS and isinstance(getattr(config, name), int)]
    for dense, slim in _uniform(changes) if heads and hidden else ():
        # the hidden size and the head counts by one ratio: in BERT and GPT-2 a head is
        # hidden_size / heads wide, so a halved hidden size with whole heads halves it
        together = {name: _scaled(getattr(config, name), dense, slim) for name in heads}
        if None not in together.values() \
                and any(getattr(config, name) == dense for name in hidden):
            moves.append({**together, **{name: slim for name in hidden}})
    pin = _head_width(config)
    return [{**move, **pin} if set(move) & set(HEAD_COUNT_FIELDS + HIDDEN_SIZE_FIELDS) else move
            for move in moves]


def _reloadable(config) -> bool:
    """Whether ``from_pretrained`` would accept ``config``: it builds the config class
    again, which runs the class's checks (transformers 5's ``LlamaConfig`` refuses a
    hidden size that is no multiple of the heads, even with ``head_dim`` set)."""
    try:
        type(config).from_dict(config.to_dict())
    except Exception:  # pylint: disable=broad-except  # any refusal: the field stays
        return False
    return True


def _sliceable(mismatches: Iterable[Mismatch]) -> bool:
    """Whether a channel config can still slice the model the config builds down to the
    slim one: no dim it builds is narrower than the model's."""
    return all(c >= s for m in mismatches if m.config_shape and m.model_shape
               and len(m.config_shape) == len(m.model_shape)
               for c, s in zip(m.config_shape, m.model_shape))


#: Attention modules' attributes that say how their width splits into heads.
HEAD_SHAPE_ATTRIBUTES = ('num_heads', 'num_attention_heads', 'num_key_value_heads',
                         'num_key_value_groups', 'head_dim', 'attention_head_size', 'head_size')


def head_shapes_differ(model: nn.Module, reference: nn.Module) -> List[str]:
    """``'<module>.<attribute>'`` of every head count or head width
    (:data:`HEAD_SHAPE_ATTRIBUTES`) that differs between ``model`` and ``reference``,
    module by module.

    Equal tensor shapes do not mean equal heads: a GPT-2 of 2 heads of 16 and one of 4
    heads of 8 hold the same tensors and compute different functions, so a config that
    builds the right shapes with the wrong heads would reload a model that computes
    something else, silently.

    Example:
        >>> a, b = nn.Module(), nn.Module()
        >>> a.num_heads, a.head_dim, b.num_heads, b.head_dim = 2, 16, 4, 8
        >>> head_shapes_differ(nn.ModuleDict({'attn': a}), nn.ModuleDict({'attn': b}))
        ['attn.num_heads', 'attn.head_dim']
    """
    built = dict(reference.named_modules())
    differ = []
    for name, module in model.named_modules():
        other = built.get(name)
        for attribute in HEAD_SHAPE_ATTRIBUTES if other is not None else ():
            own, theirs = getattr(module, attribute, None), getattr(other, attribute, None)
            if isinstance(own, int) and isinstance(theirs, int) and own != theirs:
                differ.append(f'{name}.{attribute}' if name else attribute)
    return differ


def _try(model: nn.Module, config, move: Dict[str, int],
         current: List[Mismatch]) -> Optional[Tuple[object, List[Mismatch]]]:
    """The config with ``move`` applied and its mismatches, if that is a config
    ``from_pretrained`` accepts, fixes some tensors, breaks none, and builds attention
    heads as the slim model has them wherever the tensors agree
    (:func:`head_shapes_differ`)."""
    trial = copy.deepcopy(config)
    for name, value in move.items():
        setattr(trial, name, value)
    if not _reloadable(trial):
        return None
    try:
        built = build_like(model, trial)
    except (ValueError, RuntimeError):  # the model class refuses the config
        return None
    left = shape_mismatches(model, built)
    before = {m.name for m in current}
    if not (len(left) < len(current) and {m.name for m in left} <= before
            and _sliceable(left)):
        return None
    mismatched = {m.name.rsplit('.', 2)[0] for m in left}
    if any(name.rsplit('.', 1)[0] not in mismatched for name in head_shapes_differ(model, built)):
        return None
    return trial, left


def _first_fix(model: nn.Module, config, fields: Iterable[str], mismatches: List[Mismatch]
               ) -> Optional[Tuple[object, List[Mismatch], Dict[str, int]]]:
    """The first of :func:`_moves` that :func:`_try` keeps: the new config, its
    mismatches and the move."""
    for move in _moves(config, fields, mismatches):
        found = _try(model, config, move, mismatches)
        if found is not None:
            return found + (move, )
    return None


def _head_width_pruned(model: nn.Module, reference: nn.Module) -> bool:
    """Whether an attention module's ``head_dim`` differs from the one the config builds
    (``heads='width'``).  Then no head count is rewritten: fewer heads of the config's
    width would give the same shapes and compute something else, and a config saying the
    new ``head_dim`` would rebuild RoPE's ``inv_freq`` for it, not the kept frequencies."""
    built = dict(reference.named_modules())
    return any(isinstance(getattr(module, 'head_dim', None), int)
               and getattr(built.get(name), 'head_dim', module.head_dim) != module.head_dim
               for name, module in model.named_modules())


def sync_config(model: nn.Module, fields: Tuple[str, ...] = WIDTH_FIELDS) -> ConfigSync:
    """Rewrite ``model.config`` (in place) so that it describes the slim widths: MLP
    widths, head counts and the hidden size.

    Changes are tried one at a time, each field with the values :func:`_candidates`
    derives from sizes that changed uniformly across layers, then the head counts
    together; one is kept when ``from_pretrained`` accepts the config and a model built
    from it agrees with the slim model on more tensors and disagrees on none, until no
    change helps.  Head counts change only where the model class keeps the head width:
    Llama-likes' ``head_dim``, pinned (:func:`_head_width`) for classes that read it
    when set (Qwen2, ViT); in BERT and GPT-2 fewer heads would mean wider ones, the
    shapes do not agree and the pruned heads stay mismatches, unless the hidden size
    shrank by the same ratio (the two are tried together).  No change is kept whose
    model splits a width into other heads than the slim model does
    (:func:`head_shapes_differ`): equal shapes can hide that.  A pruned ``head_dim``
    (``heads='width'``) changes no head count (:func:`_head_width_pruned`): its
    projections stay mismatches, so ``from_pretrained`` refuses the saved weights.

    Args:
        model: a pruned transformers model.
        fields: the config fields that may be rewritten.

    Returns:
        what changed and what the config still cannot describe.

    Example:
        >>> from transformers import BertConfig, BertModel
        >>> bert = BertModel(BertConfig(hidden_size=32, intermediate_size=64,
        ...                             num_hidden_layers=2, num_attention_heads=2,
        ...                             vocab_size=50))
        >>> for layer in bert.encoder.layer:  # as a pruner slims the MLPs
        ...     layer.intermediate.dense = nn.Linear(32, 16)
        ...     layer.output.dense = nn.Linear(16, 32)
        >>> sync = sync_config(bert)
        >>> sync.changed, sync.exact, bert.config.intermediate_size
        ({'intermediate_size': (64, 16)}, True, 16)
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> llama = LlamaForCausalLM(LlamaConfig(
        ...     hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        ...     num_attention_heads=4, num_key_value_heads=2, vocab_size=50))
        >>> attn = llama.model.layers[0].self_attn  # one kv head of 8 and its 2 queries
        >>> attn.q_proj, attn.k_proj = nn.Linear(32, 16, bias=False), nn.Linear(32, 8, bias=False)
        >>> attn.v_proj, attn.o_proj = nn.Linear(32, 8, bias=False), nn.Linear(16, 32, bias=False)
        >>> sync_config(llama).changed
        {'num_attention_heads': (4, 2), 'num_key_value_heads': (2, 1)}
    """
    if not is_hf_model(model):
        raise TypeError(f'sync_config rewrites the config of a transformers model, got a '
                        f'{type(model).__name__}')
    config = model.config
    reference = build_like(model)
    mismatches = shape_mismatches(model, reference)
    if _head_width_pruned(model, reference):
        fields = tuple(name for name in fields if name not in HEAD_COUNT_FIELDS)
    sync = ConfigSync()
    while mismatches:
        found = _first_fix(model, config, fields, mismatches)
        if found is None:
            break
        config, mismatches, move = found
        for name, value in move.items():
            sync.changed[name] = (getattr(model.config, name, None), value)
    for name, (_, new) in sync.changed.items():
        setattr(model.config, name, new)
    sync.mismatches = mismatches
    return sync
