"""extproj's registries (mmengine imports ``<scope>.registry`` for a default scope)."""
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import Registry

MODELS = Registry('model', parent=MMENGINE_MODELS, scope='extproj',
                  locations=['extproj.models'])
