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
