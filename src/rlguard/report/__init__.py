"""``rlguard report``: post-mortems written by the tool, from the logs (see :mod:`.build`)."""
from .build import build_report

__all__ = ["build_report"]
