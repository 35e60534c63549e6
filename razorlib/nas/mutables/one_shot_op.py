"""OneShotMutableOP and DiffMutableOP: a layer that is one of several candidate modules."""
from typing import Dict, Mapping, Optional, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS, MUTABLES
from .base import MutableChoice

ModuleOrCfg = Union[nn.Module, dict]


def build_candidates(candidates: Mapping[str, ModuleOrCfg]) -> nn.ModuleDict:
    """The candidates as a ``ModuleDict``; configs are built from ``MODELS``."""
    if not candidates:
        raise ValueError('a mutable op needs at least one candidate')
    return nn.ModuleDict({name: MODELS.build(cand) if isinstance(cand, dict) else cand
                          for name, cand in candidates.items()})


@MUTABLES.register_module()
class OneShotMutableOP(MutableChoice):
    """One layer, several candidate ops, one of them active: the unit of SPOS.

    ``forward`` runs the current candidate only, so a training step on one sampled
    path leaves the other candidates' weights without gradients.  The candidates may
    hold mutables of their own (a kernel size inside the chosen block): they nest.

    Args:
        candidates: op name -> module (or its ``MODELS`` config); every candidate maps
            the same input to outputs of the same shape.
        init_choice: the op it starts with; default the first.

    Example:
        >>> op = OneShotMutableOP(dict(conv=nn.Conv2d(4, 4, 3, padding=1), skip=nn.Identity()))
        >>> op.current_choice = 'skip'
        >>> x = torch.randn(1, 4, 5, 5)
        >>> torch.equal(op(x), x), op.choices
        (True, ('conv', 'skip'))
    """

    def __init__(self, candidates: Mapping[str, ModuleOrCfg], init_choice: Optional[str] = None):
        built = build_candidates(candidates)
        super().__init__(list(built), init_choice)
        self.candidates = built

    def forward(self, *args, **kwargs):
        return self.candidates[self.current_choice](*args, **kwargs)

    def chosen(self) -> nn.Module:
        """The current candidate: what this layer becomes in a fixed subnet."""
        return self.candidates[self.current_choice]


@MUTABLES.register_module()
class DiffMutableOP(OneShotMutableOP):
    """A DARTS edge: the softmax-weighted sum of every candidate's output.

    The weights are ``softmax(arch_param / temperature)``; ``arch_param`` is a learnable
    parameter that the DARTS algorithm optimises on held-out data, apart from the
    candidates' weights.  ``current_choice`` is what a derived subnet takes;
    :meth:`argmax` is the candidate of largest weight, which DARTS exports.

    Args:
        candidates: op name -> module (or its ``MODELS`` config).
        init_std: standard deviation of the random initial ``arch_param`` (DARTS: 1e-3).
        temperature: softmax temperature.

    Example:
        >>> op = DiffMutableOP(dict(relu=nn.ReLU(), same=nn.Identity()))
        >>> with torch.no_grad():
        ...     _ = op.arch_param.copy_(torch.tensor([0.0, 2.0]))
        >>> op.argmax()
        'same'
        >>> torch.allclose(op(torch.ones(1)), torch.ones(1))  # the weights sum to 1
        True
    """

    def __init__(self, candidates: Mapping[str, ModuleOrCfg], init_std: float = 1e-3,
                 temperature: float = 1.0):
        super().__init__(candidates)
        if temperature <= 0:
            raise ValueError(f'temperature must be > 0, got {temperature}')
        self.temperature = temperature
        self.arch_param = nn.Parameter(torch.randn(len(self.choices)) * init_std)

    def weights(self) -> torch.Tensor:
        """The mixing weight of each candidate, in ``choices`` order."""
        return F.softmax(self.arch_param / self.temperature, dim=0)

    def forward(self, *args, **kwargs):
        weights = self.weights()
        return sum(weight * candidate(*args, **kwargs)
                   for weight, candidate in zip(weights, self.candidates.values()))

    def argmax(self) -> str:
        """The candidate of largest architecture weight."""
        return self.choices[int(self.arch_param.detach().argmax())]

    def probabilities(self) -> Dict[str, float]:
        """Candidate name -> its mixing weight, for logs."""
        return {name: float(w) for name, w in zip(self.choices, self.weights().detach())}
