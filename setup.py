"""The package set, found in the tree rather than listed by hand (a hand-kept list once
forgot lazyviz.fix, and every command of a wheel failed): every folder under lazyviz/
(backends/hook holds the C++ sources, data only), and the top-level tui/ (the project's
layout keeps the UI there) installed as lazyviz.tui. The rest is in pyproject.toml."""
from setuptools import find_namespace_packages, setup

CACHES = ["*__pycache__*"]
setup(packages=[*find_namespace_packages(include=["lazyviz", "lazyviz.*"], exclude=CACHES),
                *(f"lazyviz.{name}" for name in find_namespace_packages(include=["tui", "tui.*"], exclude=CACHES))])
