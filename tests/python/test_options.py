"""Goal: kvtier.Engine's keyword arguments are the options table's Python rows (docs/options.md):
each row is a keyword that reaches the engine (the ones Python lacked before, such as the remote
key prefix and timeouts, the CXL tier, device_backend, staging_buffers and
writeback_dirty_fraction, included), none is missing and none is extra; values are checked
against the row's range and type, older spellings still work, the docstring lists every row, and
an engine whose tier refuses its options fails to open with an error, not a crash.
Method: read the Python rows from docs/options.md (options_table_test keeps it equal to the
table) and compare them with the extension's table; open engines with every option set to a
valid value that is not its default (a remote tier on a closed loopback port, which serves
misses); give values out of range, of the wrong type and under two spellings."""

import pathlib
import re

import pytest

import kvtier

LAYOUT = "layers=2,kv_heads=1,head_dim=16,dtype=f16,block_tokens=16"
DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "options.md"


def doc_rows():
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| `(\w+)` \| (\w+) \|[^|]*\|[^|]*\|[^|]*\| ([^|]*) \|", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3))
    return rows


def test_keywords_are_the_tables_python_rows():
    rows = doc_rows()
    assert len(rows) > 60
    documented = {name for name, (_, surfaces) in rows.items() if "Python" in surfaces}
    table = {row["name"] for row in kvtier._engine_options()}
    assert documented - table == set(), "rows naming Python that Engine() does not take"
    assert table - documented == set(), "Engine() keywords that docs/options.md does not list"
    for row in kvtier._engine_options():
        assert row["name"] in kvtier.Engine.__doc__
        assert row["doc"] in kvtier.Engine.__doc__


# A valid value that is not the default, per option (those that need a resource aside).
NON_DEFAULTS = dict(
    model_name="m", weights_digest=bytes(range(32)), device_bytes=1 << 20,
    device_copy_threads=2, device_copy_queue_max=64, device_backend="cpu", cuda_device=0,
    host_numa_node=-1, host_huge_pages="off", host_lock="off", host_prefault=False,
    cxl_bytes=1 << 20, cxl_numa_node=-1, cxl_huge_pages="off", cxl_lock="off",
    cxl_prefault=False, ssd_bytes=8 << 20, ssd_segment_bytes=1 << 20, ssd_sync="periodic",
    ssd_sync_interval_ms=50, ssd_checkpoint_interval_ms=1000, ssd_io_depth=4,
    ssd_io_backend="thread_pool", ssd_direct_io="off", ssd_queue_jobs_max=8,
    ssd_staging_buffer_bytes=1 << 16, ssd_staging_buffers=4, ssd_write_stall_ms_max=500,
    ssd_admission="after_requests", ssd_admission_requests=3, ssd_admission_slots=1024,
    ssd_write_budget_bytes_per_s=1 << 30, ssd_write_budget_burst_bytes=1 << 20,
    ssd_file_mode=0o640, write_policy="through", writeback_dirty_fraction=0.75,
    writeback_age_ms_max=250,
    ssd_codec="int8", ssd_codec_zstd_level=3, ssd_codec_group_size=64, default_ttl_ms=60000,
    worker_threads=3, thread_cpus="all", background_nice=5, background_priority="idle",
    sink_chunks=2, promote_on_load=False,
    staging_buffers=16,
    remote_cluster=False, remote_user="u", remote_password="p", remote_key_prefix="kt2",
    remote_connect_timeout_ms=50, remote_command_timeout_ms=60,
    remote_breaker_failures_to_open=2, remote_breaker_open_cooldown_us=500000,
    remote_redirects_max=3, remote_topology_refresh_interval_us=200000,
    remote_cluster_allowed_hosts=["10.0.0.9"],
    remote_insecure_plaintext=True, remote_write_policy="back", remote_admission="after_requests",
    remote_admission_requests=3, remote_admission_slots=1024,
    remote_write_budget_bytes_per_s=1 << 20, remote_write_budget_burst_bytes=1 << 20,
    remote_promote_on_load=False, remote_io_threads=3, remote_connections=2,
    prediction_enabled=True, prediction_window=3,
    prediction_successors_max=4, prediction_sessions_max=16, prediction_session_chunks_max=8,
    prediction_predict_k=2, prediction_blocks_max=32)
# Set elsewhere in this test (the tiers' switches, required ones) or by test_remote/test_engine
# (key material, which needs a key file or variable).
# The fs tier is the remote tier on a directory instead of Redis: test_fs_tier.py sets its rows.
ASIDE = {"layout", "host_bytes", "ssd_dirs", "remote_endpoints", "ssd_key_file", "ssd_key_env",
         "remote_key_file", "remote_key_env", "fs_dir", "fs_bytes_max", "fs_max_age_s",
         "fs_sweep_interval_ms", "fs_fsync", "fs_group_shared"}


def test_every_option_reaches_the_engine(tmp_path):
    names = {row["name"] for row in kvtier._engine_options()}
    assert names - set(NON_DEFAULTS) - ASIDE == set(), "a row without a value in this test"
    (tmp_path / "ssd").mkdir()
    engine = kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, ssd_dirs=[str(tmp_path / "ssd")],
                           remote_endpoints=["127.0.0.1:1"], **NON_DEFAULTS)
    ns = engine.make_namespace(salt="t")
    engine.store(ns, list(range(16)), kvtier.empty_blocks(engine, 1)).wait()
    assert engine.lookup(ns, list(range(16))).matched_tokens == 16
    kinds = [t.kind for t in engine.stats().tiers]
    assert kvtier.Tier.CXL in kinds and kvtier.Tier.SSD in kinds and kvtier.Tier.REMOTE in kinds
    engine.close()
    modes = {p.stat().st_mode & 0o777 for p in (tmp_path / "ssd").iterdir() if p.is_file()}
    assert modes == {0o640}  # ssd_file_mode reached the SSD tier (MANIFEST, checkpoint, LOCK).


def test_thread_cpus_moves_the_engines_threads_off_the_openers_core():
    """vLLM's CPU worker binds itself to its compute cores: an engine opened there with
    thread_cpus="all" runs its threads on every CPU the process may use, "" on the opener's."""
    import os
    import threading

    allowed = sorted(os.sched_getaffinity(0))
    seen = {}

    def open_bound(spec):
        os.sched_setaffinity(0, {allowed[-1]})  # This thread only.
        before = set(os.listdir("/proc/self/task"))
        engine = kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, thread_cpus=spec)
        cpus = set()
        for tid in set(os.listdir("/proc/self/task")) - before:
            cpus.add(frozenset(os.sched_getaffinity(int(tid))))
        seen[spec] = (cpus, os.sched_getaffinity(0))
        engine.close()

    for spec in ("all", ""):
        t = threading.Thread(target=open_bound, args=(spec,))
        t.start()
        t.join()
    # Every CPU the cgroup allows: at least those this process started with.
    assert len(seen["all"][0]) == 1 and next(iter(seen["all"][0])) >= set(allowed)
    assert seen["all"][1] == {allowed[-1]}  # The opener keeps its own binding.
    assert seen[""][0] == {frozenset({allowed[-1]})}
    with pytest.raises(kvtier.InvalidArgumentError, match="thread_cpus"):
        kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, thread_cpus="most")


def test_values_are_checked_against_the_table():
    with pytest.raises(kvtier.InvalidArgumentError,
                       match=r"^ssd_io_depth=999: must be from 1 to 256$"):
        kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, ssd_dirs=["/nonexistent"],
                      ssd_io_depth=999)
    with pytest.raises(kvtier.InvalidArgumentError, match="one of auto, cpu, cuda"):
        kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, device_backend="gpu")
    with pytest.raises(kvtier.InvalidArgumentError, match="writeback_dirty_fraction=2"):
        kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, writeback_dirty_fraction=2.0)
    with pytest.raises(TypeError, match="staging_buffers must be an int, got str"):
        kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, staging_buffers="16")
    with pytest.raises(TypeError, match="prediction_enabled must be a bool, got int"):
        kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, prediction_enabled=1)
    with pytest.raises(TypeError, match="remote_endpoints must be a list of str, got str"):
        kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, remote_endpoints="h:1")


def test_a_tier_refusing_its_options_fails_open_cleanly(tmp_path):
    # The remote store refuses an ACL user without a password after the SSD tier opened: the
    # half-opened engine is torn down without flushing (it crashed there once).
    with pytest.raises(kvtier.InvalidArgumentError, match="needs a password"):
        kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, ssd_dirs=[str(tmp_path)],
                      ssd_bytes=16 << 20, ssd_segment_bytes=1 << 20,
                      remote_endpoints=["127.0.0.1:1"], remote_insecure_plaintext=True,
                      remote_write_policy="back", remote_user="u")


def test_older_spellings_still_work():
    engine = kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, numa_node=-1, prediction=True,
                           ssd_codec="shuffle-zstd", ssd_codec_level=3)
    engine.close()
    with pytest.raises(TypeError, match="give prediction_enabled or prediction, not both"):
        kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, prediction_enabled=True,
                      prediction=True)


def test_a_codec_level_or_group_of_zero_is_the_codecs_default(tmp_path):
    # 0 (the keywords' default) means the codec's own level and group size, as in the C and C++
    # APIs and the CLI: shuffle-zstd at level 1, the quantized codecs (the rotated and
    # mixed-width ones too) in groups of 32 without zstd, the entropy-coded ones at level 1. The
    # engine opens and serves a stored chunk back from the SSD after a reopen.
    for codec in ("shuffle-zstd", "int8", "int4", "int8-rot", "int4-rot", "k8v4", "k8v4-rot",
                  "ecq5", "ecq6", "ecq6v5"):
        d = tmp_path / codec
        d.mkdir()
        opts = dict(layout=LAYOUT, host_bytes=1 << 20, ssd_dirs=[str(d)], ssd_bytes=8 << 20,
                    ssd_segment_bytes=1 << 20, ssd_codec=codec, ssd_codec_zstd_level=0,
                    ssd_codec_group_size=0)
        engine = kvtier.Engine(**opts)
        ns = engine.make_namespace(salt="t")
        engine.store(ns, list(range(16)), kvtier.empty_blocks(engine, 1)).wait()
        engine.close()
        engine = kvtier.Engine(**opts)
        assert engine.lookup(ns, list(range(16))).matched_tokens == 16, codec
        engine.close()
