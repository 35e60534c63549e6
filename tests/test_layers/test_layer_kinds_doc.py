"""docs/layer_kinds.md's worked example runs as written, and leaves the registry as it
found it."""
import re
from pathlib import Path

from razorlib.registry import LAYER_KINDS

DOC = Path(__file__).parents[2] / 'docs' / 'layer_kinds.md'


def test_the_worked_example_runs(capsys):
    blocks = re.findall(r'```python\n(.*?)```', DOC.read_text(), flags=re.S)
    example = next(block for block in blocks if 'class ScaledLinearKind' in block)
    try:
        exec(compile(example, str(DOC), 'exec'), {'__name__': 'layer_kinds_doc'})
    finally:
        LAYER_KINDS._module_dict.pop('ScaledLinearKind', None)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "['0', '2']"
    assert printed[1] == 'torch.Size([8, 6]) torch.Size([6, 8])'
