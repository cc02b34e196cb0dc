"""Detector plug-ins, looked up by name (``DETECTORS``); see :mod:`.base` for the interface."""
from .base import DETECTORS, FINE, TRIGGERED, UNKNOWN, Chunk, Detector, Params, Scan, register
from . import (best, changepoint, cusum, divergence, evidence, gainloss, growth, leak, level, opening, simple, spike,
    stepdown)  # (registration)

__all__ = ["DETECTORS", "Chunk", "Detector", "Params", "Scan", "register", "TRIGGERED", "FINE", "UNKNOWN"]
