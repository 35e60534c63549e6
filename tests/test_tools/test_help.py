"""Every tool's ``--help`` answers at once (no torch, mmengine runner or razorlib imported
before the arguments are parsed), with an example and a described default per option."""
import argparse
import ast
import json
import subprocess
import sys

import pytest

from conftest import REPO, load_tool

TOOLS = sorted(path.stem for path in (REPO / 'tools').glob('*.py'))
#: Modules that take seconds to import: none of them may load for --help.
HEAVY = ('torch', 'mmengine.runner', 'razorlib', 'onnxruntime', 'matplotlib')

# Runs a tool with --help in a fresh interpreter; records its parser and what got imported.
PROBE = r'''
import argparse, json, runpy, sys, time
parsers = []
parse_known_args = argparse.ArgumentParser.parse_known_args
def recording(self, *args, **kwargs):
    parsers.append(self)
    return parse_known_args(self, *args, **kwargs)
argparse.ArgumentParser.parse_known_args = recording
tool, report = sys.argv[1:]
sys.argv = [tool, '--help']
start = time.perf_counter()
try:
    runpy.run_path(tool, run_name='__main__')
    code = 0
except SystemExit as exit:
    code = exit.code
seconds = time.perf_counter() - start
actions = [dict(options=a.option_strings, dest=a.dest, help=a.help, default=repr(a.default),
                is_help=isinstance(a, argparse._HelpAction)) for a in parsers[0]._actions]
with open(report, 'w') as f:
    json.dump(dict(code=code, seconds=seconds, actions=actions,
                   loaded=[m for m in HEAVY if m in sys.modules]), f)
'''


@pytest.mark.parametrize('tool', TOOLS)
def test_help_is_fast_and_describes_every_option_with_an_example(tool, tmp_path):
    report = tmp_path / 'report.json'
    probe = f'HEAVY = {HEAVY!r}\n' + PROBE
    result = subprocess.run([sys.executable, '-c', probe, str(REPO / 'tools' / f'{tool}.py'),
                             str(report)], cwd=REPO, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads(report.read_text())
    assert data['code'] == 0
    assert data['loaded'] == [], f'--help of tools/{tool}.py imports {data["loaded"]}'
    assert data['seconds'] < 2.0  # measured 0.2 s; 3-4 s when it imported torch
    assert 'Example' in result.stdout and f'tools/{tool}.py' in result.stdout
    for action in data['actions']:
        if action['is_help']:
            continue
        name = '/'.join(action['options']) or action['dest']
        text = action['help'] or ''
        assert text and '\n' not in text, f'{tool} {name}: no one-line description'
        if action['options'] and action['default'] not in ('None', 'False', '[]', '()'):
            assert '%(default)' in text or action['default'] in text, \
                f'{tool} {name}: its default {action["default"]} is not shown'
        elif action['options']:
            assert 'default' in text, f'{tool} {name}: what happens without it is not said'


def test_the_probe_sees_argparse_actions():
    """The probe reads ``parser._actions``; check the private name still exists."""
    parser = argparse.ArgumentParser()
    parser.add_argument('--x', help='x')
    assert [a.dest for a in parser._actions] == ['help', 'x']


def test_ptq_offers_registered_observers_and_dispatchers():
    """tools/ptq.py names its choices without importing razorlib: they must exist."""
    from razorlib.quantization import DISPATCHERS, OBSERVERS

    ptq = load_tool('ptq')
    assert all(OBSERVERS.get(name) is not None for name in ptq.OBSERVER_NAMES)
    assert all(DISPATCHERS.get(name) is not None for name in ptq.DISPATCHER_NAMES)


@pytest.mark.parametrize('script', sorted(str(path.relative_to(REPO)) for folder in (
    'tools', 'benchmarks') for path in (REPO / folder).glob('*.py')))
def test_usage_examples_keep_their_line_breaks(script):
    """A command continued with a lone backslash inside a docstring is joined into one
    line of ``--help`` (the string eats the backslash and the newline): a usage example
    spanning lines must write ``\\\\``.  So the docstring has as many lines as its source."""
    tree = ast.parse((REPO / script).read_text())
    node = tree.body[0].value
    assert isinstance(node, ast.Constant) and isinstance(node.value, str), script
    spanned = node.end_lineno - node.lineno + 1
    lines = len(node.value.split('\n'))
    assert lines == spanned, f'{script}: the docstring spans {spanned} lines and has {lines}'
