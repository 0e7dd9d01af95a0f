"""A latent KV layout (multi-head latent attention, DeepSeek-V2/V3: one vector per token and layer,
no K/V split) through the Python module: the layout dict carries the kind, blocks are one plane,
a store survives a reopen from the SSD tier byte for byte, a latent cache never answers a K/V
layout of the same numbers, int8/int4 take it and k8v4 and the rotated codecs are refused with a
clear error.

Method: small engines on a temporary SSD directory (conftest's make_engine), random blocks in
the engine's own block shape, write-through so the SSD holds every block before the reopen."""

import numpy as np
import pytest

import kvtier

LATENT = dict(layers=2, kv_heads=1, head_dim=576, dtype="bf16", block_tokens=16, kind="latent")


def test_latent_blocks_are_one_plane(make_engine):
    engine = make_engine(layout=LATENT)
    assert engine.layout.endswith(",kind=latent")
    assert engine.block_shape == (1, 16, 1, 576)
    assert engine.block_bytes == 16 * 576 * 2


def test_latent_store_survives_reopen_and_never_aliases_kv(make_engine, tmp_path):
    engine = make_engine(layout=LATENT, write_policy="through")
    ns = engine.make_namespace("mla")
    tokens = np.arange(48, dtype=np.uint32)
    rng = np.random.default_rng(5)
    src = rng.integers(0, 1 << 16, size=(3, engine.layers) + engine.block_shape,
                       dtype=np.uint16).view(engine.numpy_dtype)
    engine.store(ns, tokens, src).wait()
    engine.close()

    reopened = make_engine(layout=LATENT, write_policy="through")
    ns = reopened.make_namespace("mla")
    hit = reopened.lookup(ns, tokens)
    assert hit.matched_tokens == 48 and hit.chunk_tiers[0] == kvtier.Tier.SSD
    dst = kvtier.empty_blocks(reopened, 3)
    reopened.load(ns, tokens, dst).wait()
    assert dst.view(np.uint16).tobytes() == src.view(np.uint16).tobytes()
    reopened.close()

    # A K/V engine of the same numbers on the same directory finds nothing of the latent cache.
    kv = make_engine(layout=dict(LATENT, kind="kv"), write_policy="through")
    assert kv.lookup(kv.make_namespace("mla"), tokens).matched_tokens == 0


@pytest.mark.parametrize("codec", ["k8v4", "int8-rot"])
def test_kv_splitting_codecs_refuse_latent(make_engine, codec):
    with pytest.raises(kvtier.InvalidArgumentError, match="latent"):
        make_engine(layout=LATENT, ssd_codec=codec)


@pytest.mark.parametrize("codec", ["shuffle-zstd", "int8", "int4"])
def test_codecs_take_latent(make_engine, codec):
    engine = make_engine(layout=LATENT, ssd_codec=codec)
    assert engine.block_shape[0] == 1


def test_bad_kind_is_named(make_engine):
    with pytest.raises(kvtier.InvalidArgumentError, match="kind 'mla'"):
        make_engine(layout=dict(LATENT, kind="mla"))
    with pytest.raises(kvtier.InvalidArgumentError, match="kv_heads=1"):
        make_engine(layout=dict(LATENT, kv_heads=2))


def test_latent_service_serves_latent_clients_only(tmp_path):
    """The node service with a latent layout: a client without a layout takes it (one-plane
    blocks, stored and loaded back exactly); a client naming the K/V layout of the same numbers
    is refused, naming both layouts."""
    import subprocess

    from test_serve import service_command

    text = ",".join(f"{k}={v}" for k, v in LATENT.items())
    sock = str(tmp_path / "kvtier.sock")
    proc = subprocess.Popen(service_command(sock, layout=text), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert "listening" in proc.stdout.readline()
        client = kvtier.connect(sock, name="mla")
        assert client.layout == text and client.block_shape == (1, 16, 1, 576)
        tokens = np.arange(32, dtype=np.uint32)
        src = np.random.default_rng(3).integers(
            0, 1 << 16, size=(2, client.layers) + client.block_shape,
            dtype=np.uint16).view(client.numpy_dtype)
        ns = client.make_namespace("tenant")
        client.store(ns, tokens, src).wait()
        dst = kvtier.empty_blocks(client, 2)
        client.load(ns, tokens, dst).wait()
        assert dst.view(np.uint16).tobytes() == src.view(np.uint16).tobytes()
        client.close()
        kv_text = text.replace(",kind=latent", "")
        with pytest.raises(kvtier.Error, match="kind=latent, not " + kv_text):
            kvtier.connect(sock, name="kv", layout=kv_text, timeout_ms=2000)
    finally:
        proc.kill()
        proc.wait(timeout=10)
