"""Random convolutional DAGs for masked-vs-slim equivalence sweeps.

:func:`random_arch` draws, from a seed, a small network whose forward is a *program*: a
list of steps, each reading earlier values by index.  Steps are convs (plain, depthwise,
group), residual adds, concats (of a value with itself too), chunks, SE gates and
pooling; the head is a flatten or a global pool before a Linear.  With ``dead=True`` only
the last value feeds the head, so the other sinks (an SE gate multiplied into a map that
is dropped, an add or cat whose result is unused, a map computed and discarded) are dead
branches that still run; otherwise every sink gets a head of its own.

Like ``tests/zoo.py``, nothing from razorlib is imported here.
"""
import random
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from zoo import randomize_norms

__all__ = ['Step', 'RandomNet', 'random_arch']

WIDTHS = (2, 4, 6, 8, 12, 16)
NUM_CLASSES = 5


@dataclass(frozen=True)
class Step:
    """One op of a program: ``kind`` applied to the values at ``inputs``.

    ``module`` names the step's module (convs, SE, heads), ``arg`` is the op's integer
    argument (chunk: pieces * 16 + piece index; pool: 0 max, 1 average).
    """
    kind: str
    inputs: Tuple[int, ...]
    module: str = ''
    arg: int = 0


class SE(nn.Module):
    """Squeeze-and-excitation: ``x * sigmoid(fc2(relu(fc1(mean(x)))))``."""

    def __init__(self, channels: int, squeeze: int):
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)

    def forward(self, x):
        gate = self.fc2(F.relu(self.fc1(x.mean((2, 3), keepdim=True))))
        return x * torch.sigmoid(gate)


def _chunk(net: 'RandomNet', step: Step, values: List[torch.Tensor]) -> torch.Tensor:
    pieces, index = divmod(step.arg, 16)
    return values[step.inputs[0]].chunk(pieces, dim=1)[index]


def _pool(net: 'RandomNet', step: Step, values: List[torch.Tensor]) -> torch.Tensor:
    pool = F.avg_pool2d if step.arg else F.max_pool2d
    return pool(values[step.inputs[0]], 2)


def _flatten_head(net: 'RandomNet', step: Step, values: List[torch.Tensor]) -> torch.Tensor:
    return net.layers[step.module](values[step.inputs[0]].flatten(1))


def _pooled_head(net: 'RandomNet', step: Step, values: List[torch.Tensor]) -> torch.Tensor:
    pooled = F.adaptive_avg_pool2d(values[step.inputs[0]], 1).flatten(1)
    return net.layers[step.module](pooled)


#: step kind -> how it computes its value from the earlier ones.
OPS: Dict[str, Callable[['RandomNet', Step, List[torch.Tensor]], torch.Tensor]] = {
    'module': lambda net, step, values: net.layers[step.module](values[step.inputs[0]]),
    'add': lambda net, step, values: values[step.inputs[0]] + values[step.inputs[1]],
    'cat': lambda net, step, values: torch.cat([values[i] for i in step.inputs], 1),
    'chunk': _chunk,
    'pool': _pool,
    'flatten_head': _flatten_head,
    'pooled_head': _pooled_head,
}


class RandomNet(nn.Module):
    """Runs a program of :class:`Step` s; returns the head outputs (a tuple if several)."""

    def __init__(self, steps: Sequence[Step], layers: Dict[str, nn.Module], outputs: Sequence[int]):
        super().__init__()
        self.steps = list(steps)
        self.layers = nn.ModuleDict(layers)
        self.outputs = list(outputs)

    def forward(self, x):
        values = [x]
        for step in self.steps:
            values.append(OPS[step.kind](self, step, values))
        outs = tuple(values[i] for i in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def dead_values(self) -> List[int]:
        """Indices of the values no output depends on (computed, then dropped)."""
        live, stack = set(), list(self.outputs)
        while stack:
            i = stack.pop()
            if i not in live:
                live.add(i)
                stack.extend(self.steps[i - 1].inputs if i else ())
        return [i for i in range(1, len(self.steps) + 1) if i not in live]

    def describe(self) -> str:
        """The program, one step a line (for failure messages)."""
        lines = [f'v{i + 1} = {s.kind}({", ".join(f"v{j}" for j in s.inputs)}'
                 + (f', {s.module}={self.layers[s.module]}' if s.module else '')
                 + (f', arg={s.arg}' if s.arg else '') + ')' for i, s in enumerate(self.steps)]
        return '\n'.join(lines + [f'outputs: {self.outputs}'])


@dataclass
class _Builder:
    """Draws steps while tracking each value's channels and spatial size."""
    rng: random.Random
    shapes: List[Tuple[int, int]] = field(default_factory=lambda: [(3, 8)])
    steps: List[Step] = field(default_factory=list)
    layers: Dict[str, nn.Module] = field(default_factory=dict)
    used: set = field(default_factory=set)

    def add(self, step: Step, shape: Tuple[int, int]) -> None:
        self.steps.append(step)
        self.shapes.append(shape)
        self.used.update(step.inputs)

    def pick(self, allow_input: bool = False) -> int:
        first = 0 if allow_input else 1
        # favour recent values, as real networks mostly chain
        recent = list(range(max(first, len(self.shapes) - 4), len(self.shapes)))
        return self.rng.choice(recent if self.rng.random() < 0.7 else
                               list(range(first, len(self.shapes))))

    def layer(self, module: nn.Module) -> str:
        name = f'l{len(self.layers)}'
        self.layers[name] = module
        return name

    def conv(self) -> None:
        src = self.pick(allow_input=True)
        cin, size = self.shapes[src]
        kind = self.rng.choice(('plain', 'plain', 'depthwise', 'group'))
        if kind == 'depthwise':
            groups, cout = cin, cin * self.rng.choice((1, 1, 2))
        elif kind == 'group':
            groups = self.rng.choice([g for g in (2, 3, 4) if cin % g == 0] or [1])
            cout = groups * self.rng.choice((1, 2, 3))
        else:
            groups, cout = 1, self.rng.choice(WIDTHS)
        k = self.rng.choice((1, 3))
        parts = [nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups,
                           bias=self.rng.random() < 0.3)]
        if self.rng.random() < 0.6:
            parts.append(nn.BatchNorm2d(cout))
        if self.rng.random() < 0.7:
            parts.append(self.rng.choice((nn.ReLU, nn.SiLU, nn.Hardswish))())
        self.add(Step('module', (src, ), self.layer(nn.Sequential(*parts))), (cout, size))

    def add_op(self) -> None:
        src = self.pick()
        partners = [i for i in range(1, len(self.shapes)) if self.shapes[i] == self.shapes[src]]
        self.add(Step('add', (src, self.rng.choice(partners))), self.shapes[src])

    def cat(self) -> None:
        src = self.pick()
        size = self.shapes[src][1]
        same = [i for i in range(1, len(self.shapes)) if self.shapes[i][1] == size]
        inputs = (src, ) + tuple(self.rng.choice(same) for _ in range(self.rng.choice((1, 2))))
        self.add(Step('cat', inputs), (sum(self.shapes[i][0] for i in inputs), size))

    def chunk(self) -> None:
        src = self.pick()
        channels, size = self.shapes[src]
        pieces = [p for p in (2, 3, 4) if channels % p == 0]
        if not pieces:
            return self.conv()
        p = self.rng.choice(pieces)
        self.add(Step('chunk', (src, ), arg=p * 16 + self.rng.randrange(p)),
                 (channels // p, size))

    def se(self) -> None:
        src = self.pick()
        channels, size = self.shapes[src]
        module = SE(channels, self.rng.choice((2, 4)))
        self.add(Step('module', (src, ), self.layer(module)), (channels, size))

    def pool(self) -> None:
        src = self.pick()
        channels, size = self.shapes[src]
        if size < 4:
            return self.se()
        self.add(Step('pool', (src, ), arg=self.rng.randrange(2)), (channels, size // 2))

    def head(self, src: int) -> int:
        channels, size = self.shapes[src]
        if self.rng.random() < 0.5:
            step = Step('flatten_head', (src, ),
                        self.layer(nn.Linear(channels * size * size, NUM_CLASSES)))
        else:
            step = Step('pooled_head', (src, ), self.layer(nn.Linear(channels, NUM_CLASSES)))
        self.add(step, (NUM_CLASSES, 1))
        return len(self.shapes) - 1


_DRAWS = (('conv', 5), ('add_op', 2), ('cat', 2), ('chunk', 2), ('se', 1), ('pool', 1))


def random_arch(seed: int, dead: Optional[bool] = None) -> Tuple[RandomNet, torch.Tensor]:
    """A random network and a 2x3x8x8 input, the same for the same seed.

    Args:
        seed: draws the program, the weights (norms randomised) and the input.
        dead: only the last value feeds the head, so other sinks are dead branches;
            default drawn from the seed.
    """
    rng = random.Random(seed)
    torch.manual_seed(seed)  # the layers' initial weights
    dead = rng.random() < 0.5 if dead is None else dead
    builder = _Builder(rng)
    builder.conv()
    kinds, weights = zip(*_DRAWS)
    for _ in range(rng.randint(3, 10)):
        getattr(builder, rng.choices(kinds, weights)[0])()
    last = len(builder.shapes) - 1
    sinks = [i for i in range(1, last + 1) if i not in builder.used]
    heads = [builder.head(i) for i in ([last] if dead else sinks)]
    model = RandomNet(builder.steps, builder.layers, heads)
    randomize_norms(model)
    inputs = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(seed))
    return model.eval(), inputs
