"""A test-only KvtierConnector that SIGKILLs the kvtier node service around a load, so that a test
can check what vLLM does when the service dies under it. Not part of the package.

kv_connector_extra_config adds:
  kill_file   a file holding "<pid> before" or "<pid> after": in the first step that has kvtier
              loads to start after the file appears, the worker SIGKILLs that process and waits
              (at most 10 s) until it is dead, either before it sends the step's loads to the
              service ("before": every load fails at once) or right after the service accepted
              them ("after": the kill lands while their layers are still arriving, or just
              after the last one did), then removes the file, so the test knows the kill
              happened.
"""

import os
import signal
import time

from kvtier.vllm import KvtierConnector


def _dead(pid: int) -> bool:
    """Whether pid has exited (a zombie counts: its parent, the test, has not reaped it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not _dead(pid) and time.monotonic() < deadline:
        time.sleep(0.005)


class KillServiceConnector(KvtierConnector):
    _EXTRA_CONFIG_KEYS = {"kill_file": "str"}

    def start_load_kv(self, forward_context, **kwargs):
        path = self._config.get("kill_file")
        order = None
        if path and self.has_connector_metadata() and self._get_connector_metadata().loads:
            try:
                with open(path) as f:
                    pid, order = f.read().split()
                pid = int(pid)
            except (OSError, ValueError):
                order = None  # No kill asked for (yet).
        if order == "before":
            _kill(pid)
        super().start_load_kv(forward_context, **kwargs)
        if order == "after":
            _kill(pid)
        if order is not None:
            os.unlink(path)
