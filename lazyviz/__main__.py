"""`python -m lazyviz` is the `lazyviz` command."""
from __future__ import annotations

import sys

from lazyviz.cli import main

sys.exit(main())
