"""Config rewrite: make a pruned Hugging Face model's ``config`` describe its slim widths.

A pruned model keeps its dense ``config``, so ``from_pretrained`` would build the dense
layers and fail on the saved weights' sizes.  :func:`sync_config` finds what the config
must say by building the same class from it on the ``meta`` device (shapes only, no
memory) and comparing every parameter and buffer shape with the slim model's: each
width field (``intermediate_size``, GPT-2's ``n_inner``, DistilBERT's ``hidden_dim``,
Dinov2's ``mlp_ratio`` where ``int(hidden_size * mlp_ratio)`` gives the width) and head
count (``num_attention_heads``, ``num_key_value_heads``, ...) whose change makes the
shapes agree is rewritten.  Widths the config cannot write are left in
:attr:`ConfigSync.mismatches`, and :func:`~.reload.save_pruned` saves them as a channel
config: widths that differ across layers, head counts the config class refuses, and the
heads of models whose head width is always ``hidden_size / num_attention_heads`` (BERT,
GPT-2), where fewer heads in the config would mean wider ones.

Shapes are not all a config decides: a non-persistent buffer (Gemma's ``embed_scale =
sqrt(hidden_size)``, RoPE's ``inv_freq``) is in no checkpoint, so a reload computes it
from the config.  A rewrite is kept only if the model it builds also holds the slim
model's value in each such buffer (:func:`buffer_mismatches`), and in each float a
module's ``__init__`` computes (BioGPT's ``embed_scale``, a plain float:
:func:`number_mismatches`); otherwise its widths stay for the channel config, whose
reload builds the unrewritten config and keeps the value.
"""
import copy
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

import torch
import torch.nn as nn

from ...tracing.forward import is_transformers_model

__all__ = ['MLP_WIDTH_FIELDS', 'MLP_RATIO_FIELDS', 'HEAD_COUNT_FIELDS', 'HIDDEN_SIZE_FIELDS',
           'LOW_RANK_FIELDS', 'EMBEDDING_SIZE_FIELDS', 'HIDDEN_RATIO_FIELDS', 'WIDTH_FIELDS',
           'HEAD_SHAPE_ATTRIBUTES', 'ConfigSync', 'Mismatch', 'is_hf_model', 'build_like',
           'buffer_mismatches', 'buffer_values', 'head_shapes_differ', 'module_numbers',
           'number_mismatches', 'shape_mismatches', 'sync_config']

#: Config fields that size the MLP of every layer, by model family (tried in order:
#: DistilBERT's is ``hidden_dim``, Falcon's ``ffn_hidden_size``), and a mixture of experts'
#: routed and shared experts (Qwen2/3-MoE, DeepSeek-V3), and Llama 4's dense layers' MLP
#: between its MoE layers.
MLP_WIDTH_FIELDS = ('intermediate_size', 'n_inner', 'ffn_dim', 'd_ff', 'encoder_ffn_dim',
                    'decoder_ffn_dim', 'hidden_dim', 'ffn_hidden_size', 'moe_intermediate_size',
                    'shared_expert_intermediate_size', 'intermediate_size_mlp')
#: Config fields that size the MLP as a ratio of the hidden size: Dinov2's ``mlp_ratio``,
#: ``int(hidden_size * mlp_ratio)`` wide (:func:`_ratio_candidates`).  Tried after the
#: hidden size, so that a hidden size pruned by the MLP's ratio keeps the ratio.
MLP_RATIO_FIELDS = ('mlp_ratio', )
#: Config fields that count attention heads: query heads, then key/value heads (GQA).
HEAD_COUNT_FIELDS = ('num_attention_heads', 'num_key_value_heads', 'n_head', 'num_heads',
                     'n_heads', 'encoder_attention_heads', 'decoder_attention_heads')
#: Config fields that size the hidden size (the residual stream), by model family.
HIDDEN_SIZE_FIELDS = ('hidden_size', 'n_embd', 'd_model')
#: Config fields that size factorised embeddings apart from the hidden size (ALBERT,
#: ELECTRA: ``embedding_size``, projected to ``hidden_size`` where the two differ).
EMBEDDING_SIZE_FIELDS = ('embedding_size', )
#: Config fields that size the low ranks of multi-head latent attention (MiniCPM3,
#: DeepSeek-V2/V3): ``q_a_proj``'s outputs and ``kv_a_proj_with_mqa``'s latent part.
LOW_RANK_FIELDS = ('q_lora_rank', 'kv_lora_rank')
#: Config fields the forward reads only as a ratio to the hidden size, so they are
#: rewritten with it (:func:`_keep_hidden_ratios`): MiniCPM3 divides the hidden states
#: by ``hidden_size / dim_model_base`` before ``lm_head``.
HIDDEN_RATIO_FIELDS = ('dim_model_base', )
#: What :func:`sync_config` may rewrite by default.
WIDTH_FIELDS = MLP_WIDTH_FIELDS + LOW_RANK_FIELDS + HEAD_COUNT_FIELDS + HIDDEN_SIZE_FIELDS \
    + MLP_RATIO_FIELDS + EMBEDDING_SIZE_FIELDS


@dataclass(frozen=True)
class Mismatch:
    """A tensor whose shape differs between the slim model and one built from its config
    (``None`` where one of them lacks it), or, with ``config_value`` and ``model_value``,
    a non-persistent buffer of the same shape (:func:`buffer_mismatches`) or a float
    attribute (:func:`number_mismatches`, no shapes) whose value differs."""
    name: str
    config_shape: Optional[Tuple[int, ...]]
    model_shape: Optional[Tuple[int, ...]]
    config_value: Optional[str] = None
    model_value: Optional[str] = None

    def __str__(self) -> str:
        if self.config_value is not None:
            return f'{self.name}: config builds {self.config_value}, the model has ' \
                f'{self.model_value}'
        return f'{self.name}: config builds {self.config_shape}, the model has {self.model_shape}'


@dataclass
class ConfigSync:
    """What :func:`sync_config` changed and what the config still cannot describe.

    Args:
        changed: config field -> ``(old value, new value)``.
        mismatches: tensors whose shapes a model built from the new config still gets
            wrong (widths that differ across layers).
        refused: buffer and float attribute values that a config rewrite fitting the
            shapes would have built wrong (:func:`buffer_mismatches`,
            :func:`number_mismatches`), the reason its widths stay in ``mismatches``.
    """
    changed: Dict[str, Tuple[object, object]] = field(default_factory=dict)
    mismatches: List[Mismatch] = field(default_factory=list)
    refused: List[Mismatch] = field(default_factory=list)

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


def _non_persistent_buffers(model: nn.Module) -> Iterator[Tuple[str, torch.Tensor]]:
    """``(name, buffer)`` of every buffer the state dict leaves out: a reload computes it
    from the config (or in ``_init_weights``), not from the checkpoint."""
    for prefix, module in model.named_modules(remove_duplicate=False):
        for name in sorted(module._non_persistent_buffers_set):  # pylint: disable=protected-access
            buffer = module._buffers.get(name)  # pylint: disable=protected-access
            if buffer is not None:
                yield f'{prefix}.{name}' if prefix else name, buffer


@contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Modules built inside get their parameters on ``meta`` (no memory) and their buffers
    computed on the default device, as ``accelerate.init_empty_weights(include_buffers=
    False)`` (which transformers' loading used): a model's constructor sizes a parameter
    with ``torch.empty`` and fills it after registering it, so nothing is filled.  It
    patches ``nn.Module.register_parameter`` while it lasts: not for threads that build
    other modules meanwhile."""
    register = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param: Optional[nn.Parameter]) -> None:
        register(module, name, param)
        if param is not None and param.device.type != 'meta':
            moved = type(param)(param.data.to('meta'), requires_grad=param.requires_grad)
            moved.__dict__.update(param.__dict__)
            module._parameters[name] = moved  # pylint: disable=protected-access

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def buffer_values(model: nn.Module, config=None) -> Optional[Dict[str, torch.Tensor]]:
    """The non-persistent buffers (on the CPU) of a model of ``model``'s class built from
    ``config`` (default its own): what a reload computes, since no checkpoint holds them.
    Its parameters stay on ``meta`` (:func:`_parameters_on_meta`).  ``None`` where the
    class cannot be built that way.

    Example:
        >>> from transformers import GemmaConfig, GemmaForCausalLM
        >>> gemma = GemmaForCausalLM(GemmaConfig(
        ...     hidden_size=64, intermediate_size=128, num_hidden_layers=1,
        ...     num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=50))
        >>> config = copy.deepcopy(gemma.config)
        >>> config.hidden_size = 32
        >>> float(buffer_values(gemma, config)['model.embed_tokens.embed_scale'])  # sqrt(32)
        5.656854152679443
    """
    config = copy.deepcopy(model.config if config is None else config)
    try:
        with _parameters_on_meta():
            built = type(model)(config)
    except Exception:  # pylint: disable=broad-except  # unbuildable so: no values to check
        return None
    return {name: buffer.detach().cpu() for name, buffer in _non_persistent_buffers(built)
            if buffer.device.type != 'meta'}


def _show(tensor: torch.Tensor, index: Optional[int] = None) -> str:
    """A buffer's value (its ``index``-th element, for more than one) in a few digits."""
    flat = tensor.reshape(-1)
    value = flat[0 if index is None else index].item()
    text = f'{value:.4g}' if isinstance(value, float) else str(value)
    if isinstance(value, float) and math.isfinite(value) and text.lstrip('-').isdigit():
        text += '.0'
    return text if index is None else f'{text} at [{index}] of {flat.numel()}'


def _first_difference(own: torch.Tensor, built: torch.Tensor) -> Optional[int]:
    """The flat index of the first element where ``built`` (cast to ``own``'s dtype)
    differs from ``own``, ``None`` where none does.  Exact: any tolerance would let a
    reload compute another value in a low precision (a bf16 Gemma's ``embed_scale`` of
    ``sqrt(60)`` is 7.75 where the slim model holds 8, within 8 bf16 rounding steps);
    a difference refuses a config rewrite, which leaves the width to the channel file."""
    built, own = built.to(own.dtype).reshape(-1), own.reshape(-1)
    differ = own != built
    if own.dtype.is_floating_point:
        differ &= ~(own.isnan() & built.isnan())
    found = differ.nonzero()
    return int(found[0]) if len(found) else None


def buffer_mismatches(model: nn.Module, built: Dict[str, torch.Tensor],
                      reference: Optional[Dict[str, torch.Tensor]] = None) -> List[Mismatch]:
    """The non-persistent buffers whose value a model built from a config (``built``,
    from :func:`buffer_values`) gets wrong, where the shapes agree: no checkpoint holds
    them, so a reload keeps the config's value, not the model's, and computes something
    else without an error (Gemma's ``embed_scale``, ``sqrt(hidden_size)`` at
    ``__init__``).

    A buffer of ``model`` on ``meta`` is taken as ``reference``'s, the values of the
    config the model was built from.  A value equal to ``reference``'s is no mismatch
    either: the unrewritten config builds it too (a buffer the model updated as it ran).

    Example:
        >>> model = nn.Module()
        >>> model.register_buffer('scale', torch.tensor(8.0), persistent=False)
        >>> [str(m) for m in buffer_mismatches(model, {'scale': torch.tensor(32 ** 0.5)})]
        ['scale: config builds 5.657, the model has 8.0']
    """
    reference = reference or {}
    found = []
    for name, own in _non_persistent_buffers(model):
        theirs = built.get(name)
        if own.device.type == 'meta':
            own = reference.get(name)
        if own is None or theirs is None or tuple(own.shape) != tuple(theirs.shape):
            continue  # a shape mismatch, if any, is shape_mismatches' to report
        own = own.detach().cpu()
        index = _first_difference(own, theirs)
        if index is None:
            continue
        ref = reference.get(name)
        if ref is not None and tuple(ref.shape) == tuple(theirs.shape) \
                and _first_difference(ref, theirs) is None:
            continue
        at = None if own.numel() == 1 else index
        found.append(Mismatch(name, tuple(theirs.shape), tuple(own.shape),
                              _show(theirs.to(own.dtype), at), _show(own, at)))
    return found


def module_numbers(model: nn.Module, skip: Iterable[str] = ('training', )
                   ) -> Dict[str, object]:
    """``'<module>.<attribute>'`` -> every plain number (``int``, ``float``, ``bool``) the
    modules of ``model`` hold as public attributes, but those named in ``skip``: values
    a module's ``__init__`` computes, often from the config, that no checkpoint holds.

    Example:
        >>> layer = nn.Dropout(0.25)
        >>> module_numbers(nn.ModuleDict({'drop': layer}))
        {'drop.p': 0.25, 'drop.inplace': False}
    """
    skip = set(skip)
    return {f'{name}.{attr}' if name else attr: value
            for name, module in model.named_modules()
            for attr, value in vars(module).items()
            if isinstance(value, (int, float)) and not attr.startswith('_') and attr not in skip}


def _floats(model: nn.Module) -> Dict[str, float]:
    return {name: value for name, value in module_numbers(model).items()
            if isinstance(value, float)}


def number_mismatches(model: nn.Module, built: nn.Module,
                      reference: Optional[Dict[str, float]] = None) -> List[Mismatch]:
    """The float attributes whose value a model built from a config (``built``) gets
    wrong: a module's ``__init__`` computes them from the config and no checkpoint holds
    them, so a reload keeps the config's value, not the model's, and computes something
    else without an error, as for a non-persistent buffer (BioGPT's, BART's or Whisper's
    ``embed_scale = sqrt(hidden_size)``, a plain float).  Integers are left out: they are
    the widths a rewrite changes on purpose (``embed_dim``).

    A value equal to ``reference``'s (the floats of a model built from the config the
    model was built from) is no mismatch: the unrewritten config builds it too.

    Example:
        >>> model, built = nn.Module(), nn.Module()
        >>> model.embed_scale, built.embed_scale = 8.0, 32 ** 0.5
        >>> [str(m) for m in number_mismatches(model, built)]
        ['embed_scale: config builds 5.657, the model has 8.0']
    """
    reference = reference or {}
    theirs = _floats(built)
    found = []
    for name, own in _floats(model).items():
        value = theirs.get(name)
        if value is None or _same_float(own, value) \
                or (name in reference and _same_float(reference[name], value)):
            continue
        found.append(Mismatch(name, None, None, _show(torch.tensor(value, dtype=torch.float64)),
                              _show(torch.tensor(own, dtype=torch.float64))))
    return found


def _same_float(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


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


def _ratio_candidates(config, old: object, changes: Dict[int, set]) -> List[float]:
    """The values to try for a field that sizes the MLP as ``old`` times the hidden size
    (:data:`MLP_RATIO_FIELDS`): ``slim / hidden`` for each width that changed uniformly
    from ``int(hidden * old)``, an ``int`` where ``old`` is one and it divides (Dinov2's
    config takes no float), else a float.  Whether the model builds exactly ``slim``
    from it (``int(22 * (15 / 22))`` is 14) is for the shapes to say: otherwise the
    width stays for the channel file.

    Example:
        >>> from types import SimpleNamespace
        >>> _ratio_candidates(SimpleNamespace(hidden_size=64), 2, {128: {64}, 64: {32}})
        [1]
        >>> _ratio_candidates(SimpleNamespace(hidden_size=64), 2.0, {128: {38}})
        [0.59375]
    """
    if isinstance(old, bool) or not isinstance(old, (int, float)):
        return []
    hidden = [getattr(config, name) for name in HIDDEN_SIZE_FIELDS
              if isinstance(getattr(config, name, None), int)]
    values = [slim // size if isinstance(old, int) and slim % size == 0 else slim / size
              for size in hidden for dense, slim in _uniform(changes)
              if size and dense == int(size * old)]
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
    """Config changes to try: the head counts together by one ratio (GQA's query and
    key/value heads, where a config check wants both at once, or where one projection
    holds both, as Phi-3's fused ``qkv_proj``: the query heads alone would leave it
    between the two), then each field alone.  A change of head counts pins the head
    width (:func:`_head_width`)."""
    changes = _width_changes(mismatches)
    present = [name for name in fields if hasattr(config, name)]
    moves = []
    heads = [name for name in present
             if name in HEAD_COUNT_FIELDS and isinstance(getattr(config, name), int)]
    for dense, slim in _uniform(changes) if len(heads) > 1 else ():
        together = {name: _scaled(getattr(config, name), dense, slim) for name in heads}
        if None not in together.values():
            moves.append(together)
    moves += [{name: value} for name in present
              for value in (_ratio_candidates(config, getattr(config, name), changes)
                            if name in MLP_RATIO_FIELDS
                            else _candidates(getattr(config, name), changes))]
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
    moves = [_keep_hidden_ratios(config, move) for move in moves]
    return [{**move, **pin} if set(move) & set(HEAD_COUNT_FIELDS + HIDDEN_SIZE_FIELDS) else move
            for move in moves if move is not None]


def _keep_hidden_ratios(config, move: Dict[str, int]) -> Optional[Dict[str, int]]:
    """``move`` with each of :data:`HIDDEN_RATIO_FIELDS` that the config sets scaled as
    the move scales the hidden size, so that the ratio the forward reads stays: MiniCPM3's
    logits divisor ``hidden_size / dim_model_base`` is 64 / 16 and 32 / 8 alike.  ``None``
    where such a field would need a fraction: no rewrite of the hidden size then keeps the
    outputs, so it is left to the channel file, whose reload keeps the dense config.

    Example:
        >>> from types import SimpleNamespace
        >>> config = SimpleNamespace(hidden_size=64, dim_model_base=16)
        >>> _keep_hidden_ratios(config, {'hidden_size': 32})
        {'hidden_size': 32, 'dim_model_base': 8}
        >>> _keep_hidden_ratios(config, {'hidden_size': 42}) is None  # 16 * 42 / 64 = 10.5
        True
    """
    hidden = [name for name in HIDDEN_SIZE_FIELDS if name in move]
    if not hidden:
        return move
    dense, slim = getattr(config, hidden[0]), move[hidden[0]]
    ratios = {}
    for name in HIDDEN_RATIO_FIELDS:
        value = getattr(config, name, None)
        if value is None:
            continue
        scaled = _scaled(value, dense, slim)
        if scaled is None:
            return None
        ratios[name] = scaled
    return {**move, **ratios}


def _reloadable(config) -> bool:
    """Whether ``from_pretrained`` would accept ``config``: it builds the config class
    again, which runs the class's checks (transformers 5's ``LlamaConfig`` refuses a
    hidden size that is no multiple of the heads, even with ``head_dim`` set)."""
    try:
        type(config).from_dict(config.to_dict())
    except Exception:  # pylint: disable=broad-except  # any refusal: the field stays
        return False
    return True


def _sliceable(mismatches: Iterable[Mismatch], before: Iterable[Mismatch] = ()) -> bool:
    """Whether a channel config can still slice the model the config builds down to the
    slim one: it builds every tensor the model has that the config before it built
    (ELECTRA builds no ``embeddings_project`` once ``hidden_size`` equals
    ``embedding_size``; a head the user attached is built by no config, before or after),
    and no dim it builds is narrower than the model's."""
    mismatches = list(mismatches)
    unbuilt = {m.name for m in before if m.config_shape is None}
    return all(m.config_shape is not None or m.name in unbuilt
               for m in mismatches if m.model_shape is not None) \
        and all(c >= s for m in mismatches if m.config_shape and m.model_shape
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


class _Values:
    """The non-persistent buffer values of the config the model was built from
    (:func:`buffer_values`), computed once, when a rewrite first fits the shapes, and its
    float attributes (:func:`number_mismatches`, from ``reference``: a model built from
    that config); and the mismatches of the rewrites refused for them."""

    def __init__(self, model: nn.Module, reference: nn.Module):
        self.model, self.refused = model, []
        self.numbers = _floats(reference)
        self._reference: Optional[Dict[str, torch.Tensor]] = None
        self._built = False

    @property
    def reference(self) -> Dict[str, torch.Tensor]:
        if not self._built:
            self._reference, self._built = buffer_values(self.model) or {}, True
        return self._reference


def _keeps(left: List[Mismatch], current: List[Mismatch]) -> bool:
    """Whether a config that leaves ``left`` improves on one that leaves ``current``: it
    fixes some tensors, breaks none, and a channel config can still slice what it builds."""
    return len(left) < len(current) and {m.name for m in left} <= {m.name for m in current} \
        and _sliceable(left, current)


def _try(model: nn.Module, config, move: Dict[str, int], current: List[Mismatch],
         values: Optional[_Values] = None) -> Optional[Tuple[object, List[Mismatch]]]:
    """The config with ``move`` applied and its mismatches, if that is a config
    ``from_pretrained`` accepts, fixes some tensors, breaks none (:func:`_keeps`), builds
    attention heads as the slim model has them wherever the tensors agree
    (:func:`head_shapes_differ`) and, with ``values``, computes the slim model's value
    into every non-persistent buffer (:func:`buffer_mismatches`) and float attribute
    (:func:`number_mismatches`): a value it gets wrong counts as a tensor it breaks."""
    trial = copy.deepcopy(config)
    try:
        for name, value in move.items():
            setattr(trial, name, value)
    except Exception:  # pylint: disable=broad-except  # a strict field refuses the type
        return None
    if not _reloadable(trial):
        return None
    try:
        built = build_like(model, trial)
    except (ValueError, RuntimeError):  # the model class refuses the config
        return None
    left = shape_mismatches(model, built)
    if not _keeps(left, current):
        return None
    mismatched = {m.name.rsplit('.', 2)[0] for m in left}
    if any(name.rsplit('.', 1)[0] not in mismatched for name in head_shapes_differ(model, built)):
        return None
    if values is not None:
        wrong = buffer_mismatches(model, buffer_values(model, trial) or {}, values.reference) \
            + number_mismatches(model, built, values.numbers)
        if not _keeps(left + wrong, current):
            values.refused.extend(m for m in wrong if m not in values.refused)
            return None
    return trial, left


def _first_fix(model: nn.Module, config, fields: Iterable[str], mismatches: List[Mismatch],
               values: Optional[_Values] = None
               ) -> Optional[Tuple[object, List[Mismatch], Dict[str, int]]]:
    """The first of :func:`_moves` that :func:`_try` keeps: the new config, its
    mismatches and the move."""
    for move in _moves(config, fields, mismatches):
        found = _try(model, config, move, mismatches, values)
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
    (``heads='width'``) changes no head count and no hidden size
    (:func:`_head_width_pruned`): its projections stay mismatches, so
    ``from_pretrained`` refuses the saved weights (in GPT-2 a halved ``n_embd`` would
    give the narrowed heads' shapes, and a reload would scale the attention by the new
    ``head_dim``, where the slim model keeps the dense scale).  Nor
    is one kept whose model computes another value into a non-persistent buffer than the
    slim model holds (:func:`buffer_mismatches`: Gemma's ``embed_scale`` is
    ``sqrt(hidden_size)``, so a halved hidden size stays in ``mismatches``, listed with
    the buffer in :attr:`ConfigSync.refused`), or into a float attribute
    (:func:`number_mismatches`: BioGPT's ``embed_scale``): no checkpoint holds such a
    value, a reload would compute it from the rewritten config, without an error.

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
        fields = tuple(name for name in fields
                       if name not in HEAD_COUNT_FIELDS + HIDDEN_SIZE_FIELDS)
    sync, values = ConfigSync(), _Values(model, reference)
    while mismatches:
        found = _first_fix(model, config, fields, mismatches, values)
        if found is None:
            break
        config, mismatches, move = found
        for name, value in move.items():
            sync.changed[name] = (getattr(model.config, name, None), value)
    for name, (_, new) in sync.changed.items():
        setattr(model.config, name, new)
    sync.mismatches = mismatches
    sync.refused = values.refused if mismatches else []
    return sync
