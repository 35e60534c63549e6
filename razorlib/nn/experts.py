"""SplitExperts: a mixture-of-experts layer's fused experts, one module per expert.

transformers keeps the routed experts of Mixtral, Qwen2/3-MoE, OLMoE, DeepSeek-V3 and
some sixty other model types in one module holding two 3-D parameters,
``gate_up_proj`` ``(experts, 2 * intermediate, hidden)`` and ``down_proj``
``(experts, hidden, intermediate)``, run by ``grouped_mm`` over the tokens sorted by
expert.  No expert's width can change while it stays one tensor among the others, and
the tracer sees one ``GroupedMmBackward0`` for all of them.  :class:`SplitExperts`
computes the same thing with one :class:`Expert` (``gate_proj``, ``up_proj``,
``down_proj`` Linears) per routed expert, each run on the tokens routed to it, so each
expert's intermediate channels are a group of their own that razorlib ranks and prunes
(every expert is run, on no tokens if none are routed to it, so that one trace sees
all of them).  :func:`fuse_experts` puts the fused module back once every expert of a
layer keeps the same width, so the slim model is again the transformers class, saved and
loaded by transformers itself.  The layouts transformers declares on the fused module
(``use_experts_implementation``) are read, not guessed: gate and up concatenated or
interleaved, weights stored ``(out, in)`` or transposed, with or without biases
(GPT-OSS's is interleaved, transposed and biased, with a clamped SwiGLU of its own,
:class:`ClampedSwiGLU`).  Llama 4's experts declare none and run every token through
every expert: :data:`EVERY_TOKEN_EXPERTS` holds their layout, and they split into an
:class:`EveryTokenExperts`.

Example:
    >>> import torch
    >>> from transformers import MixtralConfig, MixtralForCausalLM
    >>> model = MixtralForCausalLM(MixtralConfig(
    ...     vocab_size=32, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
    ...     num_attention_heads=2, num_key_value_heads=1, num_local_experts=4)).eval()
    >>> ids = torch.randint(0, 32, (1, 6))
    >>> dense = model(ids).logits
    >>> split_experts(model).model.layers[0].mlp.experts.experts[3].up_proj
    Linear(in_features=16, out_features=24, bias=False)
    >>> torch.allclose(model(ids).logits, dense, atol=1e-5)
    True
    >>> fuse_experts(model).model.layers[0].mlp.experts.gate_up_proj.shape
    torch.Size([4, 48, 16])
"""
import copy
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from .replace import children_matching, replace_children

__all__ = ['ClampedSwiGLU', 'Expert', 'SplitExperts', 'EveryTokenExperts', 'is_fused_experts',
           'split_experts', 'fuse_experts']

#: The gating transformers' experts apply by default: ``act_fn(gate) * up``, gate and up
#: the two halves of ``gate_up_proj``'s output.
DEFAULT_GATE = ('transformers.integrations.moe', '_default_apply_gate')


class ClampedSwiGLU(nn.Module):
    """GPT-OSS's gating of an expert's gate and up projections: the gate clamped above at
    ``limit``, the up projection to ``[-limit, limit]``, then
    ``(up + 1) * gate * sigmoid(alpha * gate)`` (``GptOssExperts._apply_gate`` on its
    interleaved output).  A pruned channel's zero gate gives zero, as the masked model's.

    Example:
        >>> gating = ClampedSwiGLU(alpha=1.702, limit=7.0)
        >>> [round(v, 3) for v in gating(torch.tensor([0., 9.]), torch.tensor([5., -9.])).tolist()]
        [0.0, -42.0]
    """

    def __init__(self, alpha: float, limit: float):
        super().__init__()
        self.alpha, self.limit = alpha, limit

    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        gate = gate.clamp(max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        return (up + 1) * (gate * torch.sigmoid(gate * self.alpha))

    def extra_repr(self) -> str:
        return f'alpha={self.alpha}, limit={self.limit}'


#: Gatings of their own that :class:`SplitExperts` computes: the ``_apply_gate`` of a
#: fused experts class (its module and qualified name) -> the gating module, from the
#: fused module.
KNOWN_GATES: Dict[Tuple[str, str], Callable[[nn.Module], nn.Module]] = {
    ('transformers.models.gpt_oss.modeling_gpt_oss', 'GptOssExperts._apply_gate'):
        lambda module: ClampedSwiGLU(module.alpha, module.limit),
}


class Expert(nn.Module):
    """One routed expert: ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``, or with a
    ``gating`` of its own ``down_proj(gating(gate_proj(x), up_proj(x)))``."""

    def __init__(self, gate_proj: nn.Linear, up_proj: nn.Linear, down_proj: nn.Linear,
                 act_fn: Optional[nn.Module] = None, gating: Optional[nn.Module] = None):
        super().__init__()
        if (act_fn is None) == (gating is None):
            raise ValueError('an Expert takes an act_fn or a gating, one of them')
        self.gate_proj, self.up_proj, self.down_proj = gate_proj, up_proj, down_proj
        self.act_fn, self.gating = act_fn, gating

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_proj(x), self.up_proj(x)
        if self.gating is not None:
            return self.down_proj(self.gating(gate, up))
        return self.down_proj(self.act_fn(gate) * up)


class SplitExperts(nn.Module):
    """The experts of one fused module (:func:`is_fused_experts`), one :class:`Expert`
    each, with the fused module's forward: ``(hidden_states (tokens, hidden),
    top_k_index (tokens, k), top_k_weights (tokens, k)) -> (tokens, hidden)``, each token
    the sum of its ``k`` experts' outputs weighted by the router.

    ``from_fused`` keeps a weightless copy of the fused module (its class, config and
    activation), from which :meth:`fused` builds it again.  With biases (GPT-OSS) each
    Linear adds its bias inside its product where transformers adds it after, so in
    bfloat16 the split module's outputs can differ from the fused one's in the last bit.
    """

    def __init__(self, experts: List[Expert], fused_like: Optional[nn.Module] = None):
        super().__init__()
        self.experts = nn.ModuleList(experts)
        self.num_experts = len(experts)
        self.__dict__['fused_like'] = fused_like  # not a child: no weights, never traced

    @classmethod
    def from_fused(cls, module: nn.Module) -> 'SplitExperts':
        """The experts of ``module``, their weights (and biases) copied out of its 3-D
        parameters as its layout stores them: a :class:`SplitExperts`, or an
        :class:`EveryTokenExperts` for a module of :data:`EVERY_TOKEN_EXPERTS`."""
        gating, layout = _gating(module), _layout(module)
        experts = []
        for e in range(module.num_experts):
            gate_up, down = module.gate_up_proj[e], module.down_proj[e]
            if layout['is_transposed']:  # stored (in, out)
                gate_up, down = gate_up.t(), down.t()
            gate_up_bias = module.gate_up_proj_bias[e] if layout['has_bias'] else None
            down_bias = module.down_proj_bias[e] if layout['has_bias'] else None
            concatenated = layout['is_concatenated']
            (gate, up), (gate_bias, up_bias) = (_gate_and_up(gate_up, concatenated),
                                                _gate_and_up(gate_up_bias, concatenated))
            experts.append(Expert(_linear(gate, gate_bias), _linear(up, up_bias),
                                  _linear(down, down_bias),
                                  act_fn=None if gating is not None else module.act_fn,
                                  gating=gating))
        like = copy.copy(module)
        like.__dict__.update(_parameters={}, _buffers=dict(module._buffers),
                             _modules=dict(module._modules))
        return (cls if _declares_layout(module) else EveryTokenExperts)(experts, like)

    def widths(self) -> List[int]:
        """Each expert's intermediate width."""
        return [expert.up_proj.out_features for expert in self.experts]

    def fused(self) -> nn.Module:
        """The fused module of these experts (the class and config they were split from),
        its parameters stacked from theirs.

        Raises:
            ValueError: the experts have different widths, which one 3-D tensor cannot
                hold, or they were not split from a fused module.
        """
        widths = self.widths()
        if self.fused_like is None:
            raise ValueError('these SplitExperts were not split from a fused experts module')
        if len(set(widths)) != 1:
            raise ValueError(f'its {len(widths)} experts have widths {sorted(set(widths))}, '
                             'which one fused tensor cannot hold: keep one width per layer')
        like, first = self.fused_like, self.experts[0]
        layout = _layout(like)

        def stacked(linears: List[nn.Linear], attr: str) -> torch.Tensor:
            return torch.stack([getattr(linear, attr).detach() for linear in linears])

        def joined(attr: str) -> torch.Tensor:  # (E, 2I, ...) as the layout stores them
            gate = stacked([e.gate_proj for e in self.experts], attr)
            up = stacked([e.up_proj for e in self.experts], attr)
            if layout['is_concatenated']:
                return torch.cat([gate, up], 1)
            return torch.stack([gate, up], 2).flatten(1, 2)  # gate0, up0, gate1, ...

        gate_up, down = joined('weight'), stacked([e.down_proj for e in self.experts], 'weight')
        if layout['is_transposed']:
            gate_up, down = gate_up.transpose(1, 2), down.transpose(1, 2)
        tensors = {'gate_up_proj': (gate_up, first.gate_proj.weight),
                   'down_proj': (down, first.down_proj.weight)}
        if layout['has_bias']:
            tensors.update(gate_up_proj_bias=(joined('bias'), first.gate_proj.bias),
                           down_proj_bias=(stacked([e.down_proj for e in self.experts], 'bias'),
                                           first.down_proj.bias))
        params = {name: nn.Parameter(tensor.contiguous(), source.requires_grad)
                  for name, (tensor, source) in tensors.items()}
        fused = copy.copy(like)
        fused.__dict__.update(_parameters=params, _buffers=dict(like._buffers),
                              _modules=dict(like._modules))
        hidden = first.down_proj.out_features  # slim too where the hidden size was pruned
        for attr, width in (('intermediate_dim', widths[0]), ('intermediate_size', widths[0]),
                            ('expert_dim', widths[0]), ('hidden_dim', hidden),
                            ('hidden_size', hidden)):
            if hasattr(like, attr):  # Mixtral's *_dim, GPT-OSS's *_size, Llama 4's both
                setattr(fused, attr, width)
        return fused

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(hidden_states)
        for e, expert in enumerate(self.experts):  # every one, so a trace sees them all
            token, slot = _routed(top_k_index, e)
            routed = expert(hidden_states[token]) * top_k_weights[token, slot, None]
            out = out.index_add(0, token, routed.to(out.dtype))
        return out


class EveryTokenExperts(SplitExperts):
    """The split experts of a module of :data:`EVERY_TOKEN_EXPERTS` (Llama 4's), with its
    forward: ``hidden_states`` ``(experts * tokens, hidden)``, expert-major, each expert's
    rows already scaled by the router -> each expert run on its own rows, expert-major."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        rows = hidden_states.view(self.num_experts, -1, hidden_states.shape[-1])
        return torch.cat([expert(rows[e]) for e, expert in enumerate(self.experts)])


def _routed(top_k_index: torch.Tensor, expert: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The tokens routed to ``expert`` and the slots of ``top_k_index`` (tokens, k) that
    route them.  On the meta device, where the routing has no values (``torch.where``'s
    indices have a data-dependent count), every token in slot 0: the shapes a
    shape-only trace needs, and FLOPs counted there count every token against every
    expert.

    Example:
        >>> _routed(torch.tensor([[0, 1], [1, 2]]), 1)
        (tensor([0, 1]), tensor([1, 0]))
        >>> _routed(torch.empty(3, 2, dtype=torch.long, device='meta'), 1)[0].shape
        torch.Size([3])
    """
    if top_k_index.is_meta:
        token = torch.arange(top_k_index.shape[0], device='meta')
        return token, torch.zeros_like(token)
    return torch.where(top_k_index == expert)


def _linear(weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> nn.Linear:
    """A Linear holding a copy of ``weight`` ``(out, in)`` (and of ``bias``), slices of
    fused parameters, trainable where those are."""
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device='meta')
    linear.weight = nn.Parameter(weight.detach().clone(), requires_grad=weight.requires_grad)
    if bias is not None:
        linear.bias = nn.Parameter(bias.detach().clone(), requires_grad=bias.requires_grad)
    return linear


def _gate_and_up(rows: Optional[torch.Tensor], concatenated: bool
                 ) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """The gate's and the up projection's rows of a fused ``gate_up`` tensor (first dim
    ``2 * I``): its two halves, or its even and odd rows where they interleave."""
    if rows is None:
        return None, None
    if concatenated:
        return rows[:rows.shape[0] // 2], rows[rows.shape[0] // 2:]
    return rows[0::2], rows[1::2]


def _gating(module: nn.Module) -> Optional[nn.Module]:
    """The gating module of a fused experts module with a gating of its own
    (:data:`KNOWN_GATES`), or None for transformers' default ``act_fn(gate) * up``."""
    gate = getattr(type(module), '_apply_gate', None)
    if gate is None or (gate.__module__, gate.__name__) == DEFAULT_GATE:
        return None
    known = KNOWN_GATES.get((gate.__module__, gate.__qualname__))
    if known is None:
        raise ValueError(f'{type(module).__name__} has a gating of its own '
                         f'({type(module).__name__}._apply_gate), which SplitExperts cannot '
                         'compute')
    return known(module)


#: What transformers' ``use_experts_implementation`` sets on a fused experts module: its
#: layout, which :func:`split_experts` reads rather than guess it from shapes.
LAYOUT = ('has_gate', 'is_concatenated', 'is_transposed', 'has_bias', 'has_post_expert_norm',
          '_is_expert_parallel')
#: The values of :data:`LAYOUT` that :class:`SplitExperts` needs (the others it reads).
REQUIRED = {'has_gate': True, 'has_post_expert_norm': False, '_is_expert_parallel': False}


#: Fused experts classes that declare no layout and run every token through every expert
#: (the router's scores, zero for the experts not chosen, already scale their input rows,
#: expert-major): the class (its module and qualified name) -> its layout.  Llama 4's
#: ``bmm`` over ``gate_up_proj`` ``(E, H, 2I)`` and ``down_proj`` ``(E, I, H)``.
EVERY_TOKEN_EXPERTS: Dict[Tuple[str, str], Dict[str, bool]] = {
    ('transformers.models.llama4.modeling_llama4', 'Llama4TextExperts'): dict(
        has_gate=True, is_concatenated=True, is_transposed=True, has_bias=False,
        has_post_expert_norm=False, _is_expert_parallel=False),
}


def _declares_layout(module: nn.Module) -> bool:
    """Whether ``module`` carries every :data:`LAYOUT` attribute itself."""
    return all(hasattr(module, attr) for attr in LAYOUT)


def _layout(module: nn.Module) -> Optional[Dict[str, bool]]:
    """The layout of a fused experts module, :data:`LAYOUT`'s attributes: as it declares
    them (a later transformers may declare one for a class of the table), else as
    :data:`EVERY_TOKEN_EXPERTS` has them for its class; None where neither says."""
    if _declares_layout(module):
        return {attr: getattr(module, attr) for attr in LAYOUT}
    return EVERY_TOKEN_EXPERTS.get((type(module).__module__, type(module).__qualname__))


def is_fused_experts(module: nn.Module) -> bool:
    """Whether ``module`` is one of transformers' fused experts modules, with 3-D
    ``gate_up_proj`` and ``down_proj`` parameters and ``num_experts``: one that says its
    layout (``use_experts_implementation``, :data:`LAYOUT`), or one of
    :data:`EVERY_TOKEN_EXPERTS` (Llama 4's)."""
    params = module._parameters
    return (getattr(params.get('gate_up_proj'), 'ndim', 0) == 3
            and getattr(params.get('down_proj'), 'ndim', 0) == 3
            and isinstance(getattr(module, 'num_experts', None), int)
            and _layout(module) is not None)


def _unsupported(module: nn.Module) -> Optional[str]:
    """What of a fused experts module :class:`SplitExperts` does not compute (None: it
    computes all of it)."""
    layout = _layout(module)
    for attr, expected in REQUIRED.items():
        if layout[attr] != expected:
            return f'{attr}={layout[attr]}'
    try:
        gating = _gating(module)
    except ValueError:
        return f'a gating of its own ({type(module).__name__}._apply_gate)'
    gate_up, down = module.gate_up_proj.shape, module.down_proj.shape
    if layout['is_transposed']:
        gate_up, down = gate_up[:1] + gate_up[2:0:-1], down[:1] + down[2:0:-1]
    experts, twice, hidden = gate_up
    shapes_fit = down[:2] == (experts, hidden) and twice == 2 * down[2]
    if layout['has_bias']:
        shapes_fit = shapes_fit and \
            getattr(getattr(module, 'gate_up_proj_bias', None), 'shape', None) == \
            (experts, twice) and \
            getattr(getattr(module, 'down_proj_bias', None), 'shape', None) == (experts, hidden)
    if not shapes_fit or (gating is None
                          and not isinstance(getattr(module, 'act_fn', None), nn.Module)):
        return (f'gate_up_proj {tuple(module.gate_up_proj.shape)} and down_proj '
                f'{tuple(module.down_proj.shape)} (expected (E, 2I, H) and (E, H, I), '
                'transposed where is_transposed, with biases of (E, 2I) and (E, H) where '
                'has_bias) and an act_fn module or a known gating')
    return None


def split_experts(model: nn.Module) -> nn.Module:
    """Replace every fused experts module in ``model`` (:func:`is_fused_experts`) by a
    :class:`SplitExperts` with the same weights, so that razorlib can prune each expert's
    intermediate width; in place, and returns ``model``.

    Every module is checked before any is replaced: a layout :class:`SplitExperts` does
    not compute (a gating of its own other than GPT-OSS's, a norm after each expert,
    experts without a gate) raises ValueError naming the module, with ``model``
    unchanged.  Each module is then replaced
    as soon as it is split, so that only one layer's experts are held twice at a time; a
    failure while copying the weights (out of memory) leaves ``model`` part converted.
    """
    if is_fused_experts(model):
        raise ValueError('the model itself is a fused experts module: convert it with '
                         'SplitExperts.from_fused(model)')

    return replace_children(model, is_fused_experts, SplitExperts.from_fused,
                            unsupported=_unsupported, converter='split_experts', in_turn=True)


def fuse_experts(model: nn.Module) -> nn.Module:
    """Put back the fused module of every :class:`SplitExperts` in ``model``
    (:meth:`SplitExperts.fused`); in place, and returns ``model``.

    Raises:
        ValueError: naming the first module whose experts differ in width (the model is
            unchanged).
    """
    fused: Dict[int, nn.Module] = {}
    for name, _, _, module in children_matching(model, lambda m: isinstance(m, SplitExperts)):
        if id(module) not in fused:
            try:
                fused[id(module)] = module.fused()
            except ValueError as err:
                raise ValueError(f'{name}: {err} (the model is unchanged)') from None
    return replace_children(model, lambda m: isinstance(m, SplitExperts),
                            lambda m: fused[id(m)])
