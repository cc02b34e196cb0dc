"""Judging: records in, alerts and decisions out (the watchdog, one rule instance per rule and
metric, columns, feeds, guards, firing)."""
