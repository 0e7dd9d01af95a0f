"""A test-only KvtierConnector that SIGKILLs the kvtier node service in the middle of a load, so
that a test can check what vLLM does when the service dies under it. Not part of the package.

kv_connector_extra_config adds:
  kill_file   a file holding a process id: in the first step that starts kvtier loads after the
              file appears, the worker SIGKILLs that process right after the loads were sent to
              the service (their layers still arriving), then removes the file, so the test
              knows the kill happened.
"""

import os
import signal

from kvtier.vllm import KvtierConnector


class KillServiceConnector(KvtierConnector):
    def start_load_kv(self, forward_context, **kwargs):
        super().start_load_kv(forward_context, **kwargs)
        path = self._config.get("kill_file")
        if not path or not self._active_loads:
            return
        try:
            with open(path) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            return  # No kill asked for (yet).
        os.kill(pid, signal.SIGKILL)
        os.unlink(path)
