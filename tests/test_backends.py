"""Unit tests of lazyviz.backends: the registry, and which backend a script's imports name."""
from __future__ import annotations

import pytest

from lazyviz.backends import BackendError, detect_backend


def test_backend_detection() -> None:
    assert detect_backend({"torch", "torch._lazy", "torch._lazy.ts_backend"}) == "ts"
    assert detect_backend({"torch", "torch_xla.core.xla_model"}) == "xla"
    assert detect_backend({"torch"}, {}) == "ts" and detect_backend(None, {}) == "ts"
    # A script that never imports torch_xla, run with PJRT_DEVICE set where torch_xla is
    # installed: a library (transformers) imports it and trains there.
    assert detect_backend({"torch", "transformers"}, {"PJRT_DEVICE": "CPU"}, lambda module: True) == "xla"
    assert detect_backend({"torch", "transformers"}, {"PJRT_DEVICE": "CPU"}, lambda module: False) == "ts"
    assert detect_backend({"torch._lazy"}, {"PJRT_DEVICE": "CPU"}, lambda module: True) == "ts"
    with pytest.raises(BackendError, match="pass --backend ts or --backend xla"):
        detect_backend({"torch._lazy", "torch_xla"})


def test_a_fork_is_picked_over_the_backend_it_extends(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork built on torch_xla imports it too: a script of the fork's is the fork's, and a
    process that imported both traces on the fork (lazyviz.trace without a backend)."""
    from lazyviz import backends

    fork = backends.BackendEntry("lazyviz.backends.xla:XlaBackend", ("neuronfork",), ("torch", "torch_xla",
                                 "neuronfork"), options={"package": "neuronfork"}, extends="xla")
    monkeypatch.setitem(backends.BACKENDS, "neuronfork", fork)
    backends.backends.cache_clear()
    try:
        assert detect_backend({"torch", "neuronfork", "torch_xla"}) == "neuronfork"
        assert detect_backend({"torch", "torch_xla"}) == "xla"
        assert backends.imported_backend({"torch", "torch._lazy", "torch_xla", "neuronfork"}) == "neuronfork"
        assert backends.imported_backend({"torch", "torch._lazy"}) == "ts"
        with pytest.raises(BackendError, match="pass --backend ts or --backend neuronfork"):
            detect_backend({"torch._lazy", "neuronfork"})
    finally:
        backends.backends.cache_clear()
