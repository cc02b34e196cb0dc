"""Rule packs: the spec (pydantic models, loading with file:line errors), the text of their
descriptions, the vocabulary of metric names, the plan a set of packs asks of a run, the
generated reference, where the shipped packs are (``data``: a link to the top-level ``rules/``),
and their validated form cached between processes."""
