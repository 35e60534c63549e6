"""``LogCapture``: the messages a tool logs, for the tool tests of any test directory
(``tests/`` is on the path, see ``conftest.py``)."""
import functools
import inspect
from types import ModuleType

import pytest


class LogCapture:
    """Keeps the messages a tool logs: those of its ``print_log``, which is replaced, and
    the refusals it logs with ``razorlib.utils.cli.refuse``, which runs as it is with
    mmengine's ``print_log`` replaced while it does (replaced for longer, it would also
    catch what mmengine's registries log)."""

    def __init__(self, tool: ModuleType, monkeypatch):
        import mmengine.logging

        from razorlib.utils import cli

        self.messages = []
        refuse = inspect.unwrap(cli.refuse)  # not an earlier capture's wrapper

        def record(msg, logger=None, level=None):
            self.messages.append(msg)

        @functools.wraps(refuse)
        def recorded_refuse(*args, **kwargs):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(mmengine.logging, 'print_log', record)
                return refuse(*args, **kwargs)

        # raising=False: a tool that logs nothing but refusals (ptq) has no print_log
        monkeypatch.setattr(tool, 'print_log', record, raising=False)
        monkeypatch.setattr(cli, 'refuse', recorded_refuse)

    @property
    def text(self) -> str:
        return '\n'.join(self.messages)
