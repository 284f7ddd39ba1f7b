"""The model of a project installed as a package (pip install -e .)."""
