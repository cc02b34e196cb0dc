"""The README is a front door and docs/ says what the code does (issue 24).

* Every subcommand and every option of `rlguard` (and `rlguard-train`) is documented: a command
  line in the docs that starts with the subcommand names the option.
* Every command line in README.md and docs/ (fenced code blocks and inline code that start with
  `rlguard` or `rlguard-train`) names a subcommand and options that exist.
* README.md stays at most 250 lines.
* Every relative link (and its #anchor) resolves.
* docs/detectors.md holds exactly what `rlguard rules detectors` prints (regenerate the block
  with `python tests/test_docs.py --write-detectors`).
* Every daemon config key is documented. (docs/architecture.md's rooms: tests/test_architecture.py.)

A command line is a fenced-code line (joined with its indented continuation lines, without
its `# comment`) or an inline code span whose first word is the program. Flags of other
programs (pip, accelerate, bench scripts) are not judged.
"""
from __future__ import annotations

import argparse
import io
import re
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
DETECTORS_PAGE = DOCS / "detectors.md"
BEGIN, END = "<!-- BEGIN rlguard rules detectors -->", "<!-- END rlguard rules detectors -->"
PROGRAMS = ("rlguard", "rlguard-train")
MAX_README_LINES = 250


# ---------------------------------------------------------------- the parsers
def _rlguard_parser() -> argparse.ArgumentParser:
    from rlguard.cli.main import build_parser

    return build_parser()


def _trainer_parser() -> argparse.ArgumentParser:
    sys.path.insert(0, str(ROOT / "trainer"))
    from rlguard_trainer.cli import build_parser

    return build_parser()


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in p._actions:  # argparse exposes its sub-commands only this way
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def _options(p: argparse.ArgumentParser) -> set[str]:
    return {s for a in p._actions for s in a.option_strings if s not in ("-h", "--help")}


def commands(program: str, p: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], set[str]]:
    """(program, subcommand, ...) -> its option strings, for every parser in the tree."""
    out = {(program, *path): _options(p)}
    for name, sub in _subparsers(p).items():
        out.update(commands(program, sub, (*path, name)))
    return out


def cli_commands() -> dict[tuple[str, ...], set[str]]:
    return {**commands("rlguard", _rlguard_parser()), **commands("rlguard-train", _trainer_parser())}


# ---------------------------------------------------------------- the docs
def doc_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_LEADING = re.compile(r"^(\$\s+|[A-Z_][A-Z0-9_]*=\S*\s+)+")  # a prompt, VAR=value prefixes
_FLAG = re.compile(r"(?<![\w/.=-])(--[A-Za-z0-9][A-Za-z0-9_-]*|-[A-Za-z])(?![\w-])")


def _strip_comment(line: str) -> str:
    return re.sub(r"(^|\s)#.*$", "", line)


def _program_line(text: str) -> str | None:
    """The command from `program ...` on, or None when the text is not a command of ours. A
    module launch (`... -m rlguard_trainer.cli ARGS`) is the trainer's command with ARGS."""
    text = _LEADING.sub("", text.strip())
    m = re.search(r"-m rlguard_trainer\.cli\b", text)
    if m:
        return "rlguard-train" + text[m.end():]
    first = text.split(maxsplit=1)[0] if text.split() else ""
    first = first.rsplit("/", 1)[-1] if first.startswith((".venv/", "./")) else first
    if first in PROGRAMS:
        return first + text[len(text.split(maxsplit=1)[0]):]
    return None


def _block_commands(block: list[tuple[int, str]], indent: int) -> list[tuple[int, str]]:
    """Commands of one fenced block. In a block with a `$ ` prompt only prompted lines are
    commands (the rest is their output); elsewhere a line at the block's indentation starts a
    command, and deeper lines (or lines after a trailing backslash) continue it."""
    prompted = any(raw.lstrip().startswith("$ ") for _, raw in block)
    out: list[tuple[int, str]] = []
    current: tuple[int, str] | None = None
    for n, raw in block:
        text = _strip_comment(raw)
        deeper = len(raw) - len(raw.lstrip()) > indent
        continued = current is not None and current[1].rstrip().endswith("\\")
        if current and (continued or (deeper and not prompted)):
            if text.strip():
                current = (current[0], current[1].rstrip().rstrip("\\").rstrip() + " " + text.strip())
            continue
        if current:
            out.append(current)
        starts = not deeper and (not prompted or raw.lstrip().startswith("$ "))
        cmd = _program_line(text) if starts else None
        current = (n, cmd) if cmd else None
    if current:
        out.append(current)
    return out


def command_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, command) for every command of ours the file writes."""
    out: list[tuple[int, str]] = []
    block: list[tuple[int, str]] | None = None
    indent = 0
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        if _FENCE.match(raw):
            if block is None:
                block, indent = [], len(raw) - len(raw.lstrip())  # a block in a list item is indented
            else:
                out += _block_commands(block, indent)
                block = None
            continue
        if block is not None:
            block.append((n, raw))
            continue
        for span in _INLINE.findall(raw):
            cmd = _program_line(span)
            if cmd:
                out.append((n, cmd))
    return out


def resolve(cmd: str, known: dict[tuple[str, ...], set[str]]) -> tuple[tuple[str, ...], list[str]]:
    """(the longest known command path the words start with, the words after it)."""
    words = cmd.split()
    path = (words[0],)
    rest = words[1:]
    while rest and (*path, rest[0]) in known:
        path, rest = (*path, rest[0]), rest[1:]
    return path, rest


def all_command_lines() -> list[tuple[Path, int, str]]:
    return [(f, n, c) for f in doc_files() for n, c in command_lines(f)]


# ---------------------------------------------------------------- (a) the CLI is documented
def undocumented(known: dict[tuple[str, ...], set[str]], lines: list[tuple[Path, int, str]]) -> list[str]:
    missing = []
    for path, options in sorted(known.items()):
        if path == ("rlguard",) or _subparsers_of(path, known):
            # a group (`rlguard rules`) is documented through its subcommands; the bare program
            # only has --version
            options = options - {"--version"}
        mine = [c for _, _, c in lines if resolve(c, known)[0] == path]
        if not mine and not _subparsers_of(path, known) and path != ("rlguard",):
            missing.append(f"`{' '.join(path)}`: no command line in README.md or docs/")
            continue
        said = {t for c in mine for t in _FLAG.findall(c)}
        missing += [f"`{' '.join(path)} {o}`" for o in sorted(options - said)]
    return missing


def test_every_subcommand_and_option_is_documented():
    missing = undocumented(cli_commands(), all_command_lines())
    assert not missing, "undocumented in README.md/docs/ (write a usage line naming them):\n" + "\n".join(missing)


def _subparsers_of(path: tuple[str, ...], known) -> bool:
    return any(k[: len(path)] == path and len(k) > len(path) for k in known)


# ---------------------------------------------------------------- (b) the docs name what exists
def nonexistent(known: dict[tuple[str, ...], set[str]], lines: list[tuple[Path, int, str]]) -> list[str]:
    wrong = []
    for f, n, cmd in lines:
        path, rest = resolve(cmd, known)
        where = f"{f.name}:{n}"
        if _subparsers_of(path, known) and rest and not rest[0].startswith("-") and path[0] == "rlguard":
            wrong.append(f"{where}: `{' '.join(path)} {rest[0]}` is not a command (in: {cmd})")
            continue
        options = known[path] | {"-h", "--help"}
        wrong += [f"{where}: `{' '.join(path)}` has no option {flag} (in: {cmd})"
                  for flag in _FLAG.findall(" ".join(rest)) if flag not in options]
    return wrong


def test_every_documented_command_and_flag_exists():
    wrong = nonexistent(cli_commands(), all_command_lines())
    assert not wrong, "\n".join(wrong)


def test_the_two_checks_can_fail(tmp_path, monkeypatch):
    """A flag added to the CLI without a doc, and a doc naming a flag or a command that does
    not exist, are both caught."""
    import rlguard.cli.main

    real = rlguard.cli.main.build_parser

    def with_new_flag():
        p = real()
        _subparsers(p)["check"].add_argument("--zz-new-flag")
        return p

    lines = all_command_lines()
    before = set(undocumented(cli_commands(), lines))
    monkeypatch.setattr(rlguard.cli.main, "build_parser", with_new_flag)
    assert set(undocumented(cli_commands(), lines)) - before == {"`rlguard check --zz-new-flag`"}
    monkeypatch.setattr(rlguard.cli.main, "build_parser", real)

    page = tmp_path / "p.md"
    page.write_text("Try `rlguard check LOG --bogus` and `rlguard frobnicate`.\n\n```\nrlguard rules list --rules P --nope\n```\n")
    lines = [(page, n, c) for n, c in command_lines(page)]
    assert nonexistent(cli_commands(), lines) == [
        "p.md:1: `rlguard check` has no option --bogus (in: rlguard check LOG --bogus)",
        "p.md:1: `rlguard frobnicate` is not a command (in: rlguard frobnicate)",
        "p.md:4: `rlguard rules list` has no option --nope (in: rlguard rules list --rules P --nope)",
    ]


def test_command_extraction_sees_usage_blocks_and_inline_code(tmp_path):
    """The extraction the two tests above rely on: continuation lines, comments, prompts,
    environment prefixes, inline spans, module launches; other programs are left alone."""
    page = tmp_path / "p.md"
    page.write_text("\n".join([
        "Run `rlguard check --format json` or `pip install -e .` and `rlguard/stop.json`.",
        "```",
        "rlguard daemon --watch DIR   # --not-a-flag in a comment",
        "                 [--shard I/N]",
        "PYTHONPATH=x rlguard-train --output-dir D \\",
        "    --seed 1",
        "accelerate launch --config_file c.yaml -m rlguard_trainer.cli --max-steps 3",
        "make demo",
        "```",
        "```",
        "$ rlguard check run.jsonl",
        "rlguard check: run.jsonl (jsonl, 4 records)",
        "  incident 1: ...",
        "```",
    ]))
    assert command_lines(page) == [
        (1, "rlguard check --format json"),
        (3, "rlguard daemon --watch DIR [--shard I/N]"),
        (5, "rlguard-train --output-dir D --seed 1"),
        (7, "rlguard-train --max-steps 3"),
        (11, "rlguard check run.jsonl"),
    ]
    known = cli_commands()
    assert resolve("rlguard rules detectors --format json", known)[0] == ("rlguard", "rules", "detectors")


# ---------------------------------------------------------------- (c) a front door
def test_readme_is_a_front_door():
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; at most {MAX_README_LINES}: move the detail to docs/"
    text = README.read_text()
    for needed in ("make demo", "make test", "constraints.txt", "RLGuardCallback", "rlguard daemon",
                   "Prometheus", "Slack", "Known limitations", "docs/index.md"):
        assert needed in text, f"README.md does not mention {needed!r}"


# ---------------------------------------------------------------- (d) links resolve
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    s = re.sub(r"[`*_]", "", heading.strip().lower())
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out, fenced = set(), False
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(_slug(line.lstrip("#")))
    return out


def broken_links(files: list[Path]) -> list[str]:
    bad = []
    for f in files:
        fenced = False
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if _FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            for target in _LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # https:, mailto:
                file_part, _, anchor = target.partition("#")
                dest = (f.parent / file_part).resolve() if file_part else f
                if not dest.exists():
                    bad.append(f"{f.relative_to(ROOT)}:{n}: {target}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    bad.append(f"{f.relative_to(ROOT)}:{n}: {target}: no heading #{anchor} in {dest.name}")
    return bad


def test_every_relative_link_resolves():
    bad = broken_links(doc_files())
    assert not bad, "\n".join(bad)


def test_a_broken_link_is_caught(tmp_path):
    (tmp_path / "a.md").write_text("# Top: the `x`\n\n[ok](a.md#top-the-x) [gone](b.md) [no anchor](a.md#nope)\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        bad = broken_links([tmp_path / "a.md"])
    finally:
        ROOT = saved
    assert [b.split(": ", 1)[1] for b in bad] == ["b.md: no such file", "a.md#nope: no heading #nope in a.md"]


# ---------------------------------------------------------------- (e) the detector reference
def detectors_output() -> str:
    from rlguard.cli.main import main

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["rules", "detectors"]) == 0
    return buf.getvalue().rstrip("\n")


def _block(text: str) -> tuple[int, int]:
    start, end = text.index(BEGIN), text.index(END)
    return start + len(BEGIN), end


def reference_on_page(text: str) -> str | None:
    a, b = _block(text)
    page = text[a:b].strip("\n")
    if not (page.startswith("```text\n") and page.endswith("\n```")):
        return None
    return page[len("```text\n"):-len("\n```")]


def test_detector_reference_is_the_commands_output():
    """docs/detectors.md holds, between its markers, exactly what `rlguard rules detectors`
    prints: a detector, a parameter, a default or a meaning changed in the code fails here."""
    output = detectors_output()
    assert reference_on_page(DETECTORS_PAGE.read_text()) == output, (
        "docs/detectors.md differs from `rlguard rules detectors`: run python tests/test_docs.py --write-detectors")
    from rlguard.detectors import DETECTORS

    for name, cls in DETECTORS.items():  # the output itself names every detector and parameter
        assert f"\n{name}\n" in f"\n{output}\n"
        for param in cls.Params.model_fields:
            assert f"    {param} (" in output, f"{name}.{param}"


def test_a_stale_reference_is_caught():
    text = DETECTORS_PAGE.read_text()
    stale = text.replace("max_ratio (float, required", "max_ratio (float, default 0.5", 1)
    assert stale != text
    assert reference_on_page(stale) != detectors_output()


def write_detectors() -> None:
    text = DETECTORS_PAGE.read_text()
    a, b = _block(text)
    DETECTORS_PAGE.write_text(text[:a] + "\n```text\n" + detectors_output() + "\n```\n" + text[b:])


# ---------------------------------------------------------------- config keys and layout
def test_every_daemon_config_key_is_documented():
    from rlguard.daemon.config import AlertmanagerConfig, DaemonConfig, SlackConfig, StopConfig

    text = "\n".join(f.read_text() for f in doc_files())
    spans = set(_INLINE.findall(text))
    words = {w for s in spans for w in re.split(r"[\s,:]+", s)}
    missing = [f"{prefix}{name}" for model, prefix in ((DaemonConfig, ""), (StopConfig, "stop."), (SlackConfig, "slack."),
                                          (AlertmanagerConfig, "alertmanager."))
               for name in model.model_fields
               if name not in words and f"{prefix}{name}" not in words]
    assert not missing, f"daemon config keys no page names (in backticks): {missing}"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-detectors"]:
        sys.path.insert(0, str(ROOT / "src"))
        write_detectors()
        print(f"wrote {DETECTORS_PAGE.relative_to(ROOT)}")
    else:
        sys.exit(pytest.main([__file__, "-q"]))
