"""Warnings name the user's line, whatever razorlib, torch or mmengine frames lie between
(razorlib.utils.caller)."""
import os
import warnings

import pytest
import torch
import torch.nn as nn
from doctest_helpers import assert_examples_pass

import razorlib
from razorlib.quantization import quantize_torch_model
from razorlib.utils.caller import caller_stacklevel, warn_at_caller

LIBRARY_FILE = os.path.join(os.path.dirname(razorlib.__file__), '_not_a_module.py')


def library_code(source: str) -> dict:
    """Define ``source``'s functions as if in a file of razorlib's package."""
    namespace = {'nn': nn, 'warn_at_caller': warn_at_caller}
    exec(compile(source, LIBRARY_FILE, 'exec'), namespace)
    return namespace


def caught(call):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        call()
    return [(w.filename, w.lineno, str(w.message)) for w in record]


def line_of(text: str) -> int:
    """The number of this file's first line holding ``text``."""
    with open(__file__) as f:
        return next(number for number, line in enumerate(f, 1) if text in line)


def test_a_warning_skips_nested_library_frames():
    lib = library_code('def inner():\n    warn_at_caller("deep")\n'
                       'def outer():\n    inner()\n')
    assert caught(lambda: lib['outer']()) == \
        [(__file__, line_of("lib['outer']()) =="), 'deep')]


def test_a_warning_skips_torch_frames_between_the_user_and_razorlib():
    lib = library_code('class Layer(nn.Module):\n'
                       '    def forward(self, x):\n'
                       '        warn_at_caller("in forward")\n'
                       '        return x\n')
    layer = lib['Layer']()
    assert caught(lambda: layer(torch.zeros(1))) == \
        [(__file__, line_of('layer(torch.zeros(1))) =='), 'in forward')]


def test_a_warning_skips_a_context_managers_exit_in_contextlib():
    lib = library_code('import contextlib\n'
                       '@contextlib.contextmanager\n'
                       'def block():\n    yield\n    warn_at_caller("on exit")\n')

    def use():
        with lib['block']():
            pass
    assert caught(use) == [(__file__, line_of('with lib[\'block\']():'), 'on exit')]


def test_caller_stacklevel_counts_from_the_frame_that_asks():
    assert caller_stacklevel() == 1  # this test's own frame is outside the libraries
    lib = library_code('def level(ask):\n    return ask()\n')
    assert lib['level'](caller_stacklevel) == 2  # asked from the library's frame
    lib = library_code('from razorlib.utils.caller import caller_stacklevel\n'
                       'def level():\n    return caller_stacklevel()\n'
                       'def nested():\n    return level()\n')
    assert lib['nested']() == 3  # level, nested, then this test


def test_quantize_torch_model_says_nothing_was_quantized_at_the_callers_line():
    """quantize_graph's warning, raised two razorlib frames below quantize_torch_model,
    named razorlib/quantization/api.py before (its stacklevel counted for a direct call)."""
    x = torch.randn(1, 3, 4, 4)
    model = nn.Sequential(nn.Flatten(), nn.Softmax(1))
    ours = [w for w in caught(lambda: quantize_torch_model(model, [x], x, platform='TRT_INT8'))
            if 'runs on TRT_INT8' in w[2]]
    assert [w[:2] for w in ours] == [(__file__, line_of("lambda: quantize_torch_model(model"))]


def test_an_unmatched_except_start_key_is_warned_at_the_prune_call():
    """Raised in the pruner's preparation, it named razorlib/pruning/importance/pruner.py
    when razorlib.prune was the caller."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3))
    x = torch.randn(1, 3, 8, 8)
    ours = [w for w in caught(lambda: razorlib.prune(model, x, ratio=0.5,
                                                     except_start_keys=['nope']))
            if 'except_start_keys' in w[2]]
    assert [w[:2] for w in ours] == [(__file__, line_of("lambda: razorlib.prune(model, x"))]


def test_the_examples_run():
    assert_examples_pass('razorlib.utils.caller')


if __name__ == '__main__':
    pytest.main([__file__])
