"""Building blocks of the synthetic corpus: signal shapes, healthy runs, faults, writers."""
