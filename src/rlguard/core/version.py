"""The package version: one place, read by ``rlguard --version`` and ``rlguard.__version__``."""

VERSION = "0.1.0"  # pyproject.toml's version
