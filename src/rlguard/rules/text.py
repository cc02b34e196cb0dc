"""A rule's description says its numbers through placeholders filled from the rule itself.

``description: KL above {above} nats on {for:w} records in a row`` reads, once loaded, "KL above
1.0 nats on three records in a row" when ``params.above`` is 1.0 and ``for`` is 3: the prose
cannot drift from the numbers that decide. A placeholder names one of the rule's values:

* a detector parameter (``{window}``, with the detector's default when the rule gives none);
* ``for``, ``for_steps``, ``for_min``, ``warmup_steps``, ``min_samples``, ``cooldown``;
* a guard's bound, by position: ``{guards.0.below}``.

and may say how to write it: ``{x}`` as a number (``1,000``, ``0.6926``, ``1e-6``), ``{x:%}``
as a percentage (0.05: ``5%``), ``{x:e}`` in scientific notation (0.001: ``1e-3``), ``{x:w}``
as a word up to twelve (3: ``three``), ``{x:inv}`` as its inverse (a ratio of 0.05: ``20``),
``{x:.1f}`` with that many decimals (1.0: ``1.0``).
``{{`` and ``}}`` are literal braces. Nothing is evaluated: a name is looked up, never run.
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}:]*)(?::([^{}]*))?\}|[{}]")
_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
          "eleven", "twelve")
_FIXED = re.compile(r"^\.(\d)f$")
RULE_FIELDS = ("for", "for_steps", "for_min", "warmup_steps", "min_samples", "cooldown")


def number(v: float) -> str:
    """A value as a person writes it: ``10``, ``1,000``, ``0.6926``, ``1e-6``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return str(v)
    if float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    text = repr(float(v))
    return _compact_e(text) if "e" in text else text


def _compact_e(text: str) -> str:
    mantissa, exp = text.split("e")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    return f"{mantissa}e{int(exp)}"


def _percent(v: float) -> str:
    return number(round(v * 100, 10)) + "%"


def _scientific(v: float) -> str:
    return _compact_e(f"{v:.12e}")


def _word(v: float) -> str:
    if float(v).is_integer() and 0 <= v < len(_WORDS):
        return _WORDS[int(v)]
    raise ValueError(f"{number(v)} has no word (':w' writes 0 to {len(_WORDS) - 1})")


def _inverse(v: float) -> str:
    if v == 0:
        raise ValueError("0 has no inverse")
    return number(round(1 / v, 10))


FORMATS: dict[str, Callable[[float], str]] = {"": number, "%": _percent, "e": _scientific, "w": _word,
                                               "inv": _inverse}


def fill(template: str, values: dict[str, Any]) -> str:
    """``template`` with each placeholder replaced by its value from ``values``; an unknown name,
    an unknown format, a value that is not a number or a lone brace raises ValueError."""
    def one(m: re.Match) -> str:
        whole = m.group(0)
        if whole in ("{{", "}}"):
            return whole[0]
        if whole in ("{", "}"):
            raise ValueError(f"a lone {whole!r}: placeholders are {{name}} or {{name:format}}, "
                             "literal braces are {{ and }}")
        name, spec = m.group(1).strip(), (m.group(2) or "").strip()
        if name not in values:
            raise ValueError(f"unknown placeholder {{{name}}}; this rule has: {', '.join(sorted(values))}")
        fixed = _FIXED.match(spec)
        if spec not in FORMATS and not fixed:
            raise ValueError(f"unknown format {spec!r} in {whole}; formats: "
                             + ", ".join(repr(f) for f in FORMATS) + ", '.Nf'")
        value = values[name]
        if value is None and spec == "":
            return "unset"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if spec == "":
                return str(value)
            raise ValueError(f"{whole}: {name} is {value!r}, not a number")
        try:
            return f"{value:.{fixed.group(1)}f}" if fixed else FORMATS[spec](value)
        except ValueError as exc:
            raise ValueError(f"{whole}: {exc}") from None
    return _PLACEHOLDER.sub(one, template)


def rule_values(params: dict[str, Any], fields: dict[str, Any], guards: list[dict[str, Any]]) -> dict[str, Any]:
    """The names a rule's description may use: its detector's parameters (defaults included),
    its own persistence fields, and its guards' bounds as ``guards.N.name``."""
    values = {k: v for k, v in params.items()}
    values.update({k: fields[k] for k in RULE_FIELDS if k in fields})
    for i, g in enumerate(guards):
        values.update({f"guards.{i}.{k}": v for k, v in g.items() if k != "metric" and v is not None})
    return values
