"""Goal: careless use of the Python module gets short errors that name the problem: a misspelled
keyword (with the closest known one), a missing required one, a negative size (ValueError, not
pybind11's whole signature as a TypeError), a block array of the wrong element type (named,
rather than reported as a chunk-count problem); stats objects print their fields, and the
Prometheus text carries them; every public method and property has a docstring beyond its signature.
Method: call kvtier.Engine and store with each mistake and check the exception type and message;
read every public method's and property's docstring."""

import inspect

import numpy as np
import pytest

import kvtier

LAYOUT = "layers=2,kv_heads=1,head_dim=16,dtype=f16,block_tokens=16"


def test_misspelled_keyword_names_the_closest_one():
    with pytest.raises(TypeError) as e:
        kvtier.Engine(layout=LAYOUT, hots_bytes=1 << 20)
    assert "'hots_bytes'" in str(e.value) and "'host_bytes'" in str(e.value)
    assert len(str(e.value).splitlines()) == 1


def test_missing_required_keyword():
    with pytest.raises(TypeError, match="missing required keyword argument 'host_bytes'"):
        kvtier.Engine(layout=LAYOUT)


def test_negative_size_is_a_value_error():
    with pytest.raises(ValueError, match="ssd_bytes must be >= 0, got -5"):
        kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, ssd_bytes=-5)


def test_wrong_element_type_is_named():
    engine = kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20)
    ns = engine.make_namespace(salt="t")
    with pytest.raises(kvtier.InvalidArgumentError, match="float32 array but the layout's dtype "
                       "is f16"):
        engine.store(ns, list(range(16)), np.zeros((1, 2, 2, 16, 1, 16), np.float32))
    with pytest.raises(kvtier.InvalidArgumentError, match="float64 array"):
        engine.load(ns, list(range(16)), np.zeros((1, 2, 2, 16, 1, 16), np.float64))
    engine.close()


def test_stats_print_their_fields():
    engine = kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20)
    ns = engine.make_namespace(salt="t")
    engine.store(ns, list(range(16)), kvtier.empty_blocks(engine, 1)).wait()
    stats = engine.stats()
    assert "store_blocks=2" in repr(stats)
    assert repr(stats.tiers[0]).startswith("TierStats(") and "blocks=2" in repr(stats.tiers[0])
    assert repr(engine.lookup(ns, list(range(16)))) == "LookupResult(matched_tokens=16)"
    text = engine.metrics_text()
    assert "# TYPE kvtier_tier_blocks gauge" in text
    assert 'kvtier_tier_blocks{tier="host",name="host"} 2' in text
    engine.close()


def _written_doc(attr):
    """The docstring written for people: pybind11 puts the signature first, then a blank line;
    properties and Python functions carry only the text."""
    doc = getattr(attr, "__doc__", None) or ""
    if isinstance(attr, property) or inspect.isfunction(attr):
        return doc
    return doc.split("\n\n", 1)[1] if "\n\n" in doc else ""


def test_every_public_method_and_property_has_a_docstring():
    native = kvtier._kvtier
    classes = [kvtier.Engine, native.Engine, kvtier.LoadHandle, kvtier.StoreHandle,
               kvtier.PinHandle, native.PagedCache, native.PagedLoad, native.PagedSave]
    missing = [cls.__module__ + "." + cls.__name__ + "." + name
               for cls in classes for name, attr in vars(cls).items()
               if not name.startswith("_") and not _written_doc(attr).strip()]
    assert not missing, "no docstring: " + ", ".join(sorted(missing))
