"""Small helpers for tracing tests: trace a model and look at slots by module axis."""
from typing import Dict, Tuple

import numpy as np

from razorlib.tracing import ChannelGroups, build_groups, trace


class Traced:
    """A traced model's groups with lookups by ``(name, role)``."""

    def __init__(self, model, example_inputs, **kwargs):
        self.graph = trace(model, example_inputs, **kwargs)
        self.groups: ChannelGroups = build_groups(self.graph)
        self.uses: Dict[Tuple[str, str], object] = {(u.name, u.role): u for u in self.graph.uses}

    def classes(self, name: str, role: str = 'out') -> np.ndarray:
        """Class label of each channel of a module axis."""
        return self.groups.labels[self.uses[(name, role)].slots]

    def group_of(self, name: str):
        """The group whose layers (or norms) include ``name``."""
        for group in self.groups.groups.values():
            if name in group.layers or name in group.norms:
                return group
        raise KeyError(name)

    def reasons(self, name: str):
        return self.group_of(name).frozen_reasons
