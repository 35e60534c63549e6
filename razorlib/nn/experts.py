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
loaded by transformers itself.

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
from typing import Dict, List, Optional

import torch
import torch.nn as nn

from .replace import children_matching, replace_children

__all__ = ['Expert', 'SplitExperts', 'is_fused_experts', 'split_experts', 'fuse_experts']

#: The gating transformers' experts apply by default: ``act_fn(gate) * up``, gate and up
#: the two halves of ``gate_up_proj``'s output.
DEFAULT_GATE = ('transformers.integrations.moe', '_default_apply_gate')


class Expert(nn.Module):
    """One routed expert: ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``."""

    def __init__(self, gate_proj: nn.Linear, up_proj: nn.Linear, down_proj: nn.Linear,
                 act_fn: nn.Module):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = gate_proj, up_proj, down_proj
        self.act_fn = act_fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class SplitExperts(nn.Module):
    """The experts of one fused module (:func:`is_fused_experts`), one :class:`Expert`
    each, with the fused module's forward: ``(hidden_states (tokens, hidden),
    top_k_index (tokens, k), top_k_weights (tokens, k)) -> (tokens, hidden)``, each token
    the sum of its ``k`` experts' outputs weighted by the router.

    ``from_fused`` keeps a weightless copy of the fused module (its class, config and
    activation), from which :meth:`fused` builds it again.
    """

    def __init__(self, experts: List[Expert], fused_like: Optional[nn.Module] = None):
        super().__init__()
        self.experts = nn.ModuleList(experts)
        self.num_experts = len(experts)
        self.__dict__['fused_like'] = fused_like  # not a child: no weights, never traced

    @classmethod
    def from_fused(cls, module: nn.Module) -> 'SplitExperts':
        """The experts of ``module``, their weights copied out of its 3-D parameters."""
        gate_up, down = module.gate_up_proj, module.down_proj
        width = down.shape[2]
        experts = [Expert(_linear(gate_up[e, :width]), _linear(gate_up[e, width:]),
                          _linear(down[e]), module.act_fn) for e in range(gate_up.shape[0])]
        like = copy.copy(module)
        like.__dict__.update(_parameters={}, _buffers=dict(module._buffers),
                             _modules=dict(module._modules))
        return cls(experts, like)

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
        first = self.experts[0]
        gate_up = torch.stack([torch.cat([e.gate_proj.weight, e.up_proj.weight]).detach()
                               for e in self.experts])
        down = torch.stack([e.down_proj.weight.detach() for e in self.experts])
        params = {'gate_up_proj': nn.Parameter(gate_up, first.gate_proj.weight.requires_grad),
                  'down_proj': nn.Parameter(down, first.down_proj.weight.requires_grad)}
        fused = copy.copy(self.fused_like)
        fused.__dict__.update(_parameters=params, _buffers=dict(self.fused_like._buffers),
                              _modules=dict(self.fused_like._modules))
        fused.intermediate_dim = widths[0]
        return fused

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(hidden_states)
        for e, expert in enumerate(self.experts):  # every one, so a trace sees them all
            token, slot = torch.where(top_k_index == e)
            routed = expert(hidden_states[token]) * top_k_weights[token, slot, None]
            out = out.index_add(0, token, routed.to(out.dtype))
        return out


def _linear(weight: torch.Tensor) -> nn.Linear:
    """A bias-free Linear holding a copy of ``weight`` ``(out, in)`` (a slice of a fused
    parameter), trainable where that parameter is."""
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device='meta')
    linear.weight = nn.Parameter(weight.detach().clone(), requires_grad=weight.requires_grad)
    return linear


#: What transformers' ``use_experts_implementation`` sets on a fused experts module: its
#: layout, which :func:`split_experts` reads rather than guess it from shapes.
LAYOUT = {'has_gate': True, 'is_concatenated': True, 'is_transposed': False,
          'has_bias': False, 'has_post_expert_norm': False, '_is_expert_parallel': False}


def is_fused_experts(module: nn.Module) -> bool:
    """Whether ``module`` is one of transformers' fused experts modules
    (``use_experts_implementation``: it says its layout, :data:`LAYOUT`), with 3-D
    ``gate_up_proj`` and ``down_proj`` parameters and ``num_experts``.  Other modules
    holding 3-D expert weights (Llama 4's, run by ``bmm``) compute in their own ways."""
    params = module._parameters
    return (getattr(params.get('gate_up_proj'), 'ndim', 0) == 3
            and getattr(params.get('down_proj'), 'ndim', 0) == 3
            and isinstance(getattr(module, 'num_experts', None), int)
            and all(hasattr(module, attr) for attr in LAYOUT))


def _unsupported(module: nn.Module) -> Optional[str]:
    """What of a fused experts module :class:`SplitExperts` does not compute (None: it
    computes all of it)."""
    for attr, expected in LAYOUT.items():
        if getattr(module, attr) != expected:
            return f'{attr}={getattr(module, attr)}'
    gate = getattr(type(module), '_apply_gate', None)
    if gate is not None and (gate.__module__, gate.__name__) != DEFAULT_GATE:
        return f'a gating of its own ({type(module).__name__}._apply_gate)'
    experts, twice, hidden = module.gate_up_proj.shape
    if (module.down_proj.shape[:2] != (experts, hidden) or twice != 2 * module.down_proj.shape[2]
            or not isinstance(getattr(module, 'act_fn', None), nn.Module)):
        return (f'gate_up_proj {tuple(module.gate_up_proj.shape)} and down_proj '
                f'{tuple(module.down_proj.shape)} (expected (E, 2I, H) and (E, H, I)) '
                'and an act_fn module')
    return None


def split_experts(model: nn.Module) -> nn.Module:
    """Replace every fused experts module in ``model`` (:func:`is_fused_experts`) by a
    :class:`SplitExperts` with the same weights, so that razorlib can prune each expert's
    intermediate width; in place, and returns ``model``.

    Every module is checked before any is replaced: a layout :class:`SplitExperts` does
    not compute (biases, interleaved or transposed weights, GPT-OSS's own gating) raises
    ValueError naming the module, with ``model`` unchanged.  Each module is then replaced
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
