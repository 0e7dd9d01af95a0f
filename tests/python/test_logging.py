"""Goal: the engine's log lines reach Python's logging module (logger "kvtier") at their level, so an
application sees a tier's state changes (and a dead Redis, a direct-I/O fallback) where it sees
its own logs; a broken logging setup does not break the engine.
Method: open an engine with pytest's caplog capturing "kvtier" at INFO; the host tier's open line
must be there. Then a filter that raises out of Logger.log() is installed and an engine still
opens and works."""

import logging

import kvtier

LAYOUT = "layers=2,kv_heads=1,head_dim=16,dtype=f16,block_tokens=16"


def test_engine_lines_reach_the_logging_module(caplog):
    with caplog.at_level(logging.INFO, logger="kvtier"):
        engine = kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20)
        engine.close()
    lines = [r for r in caplog.records if r.name == "kvtier"]
    assert any("host tier" in r.getMessage() and r.levelno == logging.INFO for r in lines), \
        [r.getMessage() for r in lines]


def failing_filter(record):
    raise RuntimeError("broken filter")  # Raised out of Logger.log() itself.


def test_a_broken_logging_setup_does_not_break_the_engine():
    log = logging.getLogger("kvtier")
    log.addFilter(failing_filter)
    old_level = log.level
    log.setLevel(logging.INFO)
    try:
        engine = kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20)
        ns = engine.make_namespace(salt="t")
        engine.store(ns, list(range(16)), kvtier.empty_blocks(engine, 1)).wait()
        assert engine.lookup(ns, list(range(16))).matched_tokens == 16
        engine.close()
    finally:
        log.removeFilter(failing_filter)
        log.setLevel(old_level)
