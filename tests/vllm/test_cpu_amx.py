"""On a CPU with AMX, the connector asks Linux for the process's tile state before vLLM attends:
vLLM's CPU attention with its amx ISA runs tile instructions without asking, and a fresh vLLM
whose first prompt's prefix kvtier loads reaches them before torch's oneDNN has asked, which
was SIGILL (test_vllm_e2e.py's restart test on such a CPU). Method: allow_amx() against the
CPU's own flags in /proc/cpuinfo: granted exactly when the CPU has AMX tiles; and the connector's
startup, read from its source, calls it when vLLM's page layout is amx's."""

import inspect
from pathlib import Path

import pytest

vllm_connector = pytest.importorskip("kvtier.vllm", reason="vLLM is not installed")


def cpu_flags():
    text = Path("/proc/cpuinfo").read_text()
    line = next(line for line in text.splitlines() if line.startswith("flags"))
    return set(line.split(":", 1)[1].split())


def test_allow_amx_is_granted_exactly_when_the_cpu_has_tiles():
    has_tiles = "amx_tile" in cpu_flags()
    assert vllm_connector.allow_amx() is has_tiles
    # Asking again is harmless.
    assert vllm_connector.allow_amx() is has_tiles


def test_the_connector_asks_before_attention_when_pages_are_amxs():
    init = inspect.getsource(vllm_connector.KvtierConnector.__init__)
    layout = init.index("cpu_page_layout(vllm_config)")
    asks = init.index("allow_amx()")
    assert layout < asks, "allow_amx must follow the page layout's detection in __init__"
    assert '"amx" in self._page_layout' in init[layout:asks]
