"""What the latency tests share: a deterministic runtime and a small CNN to time.

Nothing here is timed: :class:`ParamsRuntime` "measures" a module by its parameter count,
so a test asserts exact figures and what the runtime was asked."""
import torch
import torch.nn as nn

from razorlib.pruning.runtimes import Runtime

X = torch.randn(1, 3, 16, 16)


class ParamsRuntime(Runtime):
    """A deterministic 'runtime': 0.01 ms plus 1e-5 ms per parameter.  Counts its calls,
    and records the inputs and every transformers config's ``use_cache`` while the modules
    are timed."""
    name = 'params'

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls, self.inputs, self.use_cache = 0, [], set()

    def latency(self, modules, inputs):
        self.calls += 1
        self.inputs.append(inputs)
        for module in modules:
            self.use_cache |= {m.config.use_cache for m in module.modules()
                               if hasattr(m, 'config')}
        return [0.01 + 1e-5 * sum(p.numel() for p in m.parameters()) for m in modules]


def net(width: int = 32) -> nn.Module:
    """Two 3x3 convs with batch norms and a classifier, ``width`` channels, in eval mode."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                         nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(width, 10)).eval()
