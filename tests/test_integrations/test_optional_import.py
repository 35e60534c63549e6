"""razorlib, its transformers integration and its HF layer kinds import and work where
transformers cannot be imported: transformers is an optional dependency."""
import subprocess
import sys

WITHOUT_TRANSFORMERS = '''
import sys
sys.modules['transformers'] = None  # any "import transformers" now raises ImportError
import torch
import razorlib
import razorlib.integrations.transformers as hf
import razorlib.pruning.depth
from razorlib.layers import kind_of
assert type(kind_of(torch.nn.Linear(2, 2))).__name__ == 'LinearKind'
assert not hf.is_hf_model(torch.nn.Linear(2, 2))
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
assert razorlib.prune(net, torch.randn(2, 4), ratio=0.5)[0].out_features == 4
print('ok')
'''


def test_razorlib_works_where_transformers_cannot_be_imported():
    out = subprocess.run([sys.executable, '-c', WITHOUT_TRANSFORMERS], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith('ok')
