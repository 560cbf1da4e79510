"""The README's shape: set-up and a runnable tour first, then a table of contents whose links
all land on a heading, then the reference; and no internal issue numbers in README.md or
bench/README.md (a reader outside the project cannot look them up).

The heading anchors are GitHub's rule, written here apart from any Markdown library:
lowercase, drop every character that is not a letter, digit, space, hyphen or underscore,
spaces to hyphens, and ``-1``, ``-2``... for repeats. Lines inside fenced blocks (a bash
comment starts with ``#`` too) are no headings.
"""

from __future__ import annotations

import re
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
README = CHECKOUT / "README.md"
BENCH_README = CHECKOUT / "bench" / "README.md"


def _prose_lines(path: Path) -> list[str]:
    """The lines of a Markdown file outside its fenced blocks."""
    out, inside = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside:
            out.append(line)
    return out


def _headings(path: Path) -> list[tuple[int, str]]:
    """(level, text) of every ATX heading outside fenced blocks."""
    return [(len(m.group(1)), m.group(2).strip()) for line in _prose_lines(path)
            if (m := re.match(r"^(#{1,6})\s+(.*)$", line))]


def _slug(text: str) -> str:
    text = re.sub(r"`", "", text.lower())
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for _, text in _headings(path):
        base = _slug(text)
        n = seen.get(base, 0)
        anchors.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return anchors


def _sections(path: Path) -> dict[str, str]:
    """Level-2 heading -> the text up to the next level-2 heading (fenced blocks included)."""
    parts = re.split(r"^## (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_slug_rule_by_hand():
    assert _slug("Tune SAUCE: sweeps and fitted parameters") == (
        "tune-sauce-sweeps-and-fitted-parameters")
    assert _slug("Best-of-K selection") == "best-of-k-selection"
    assert _slug("CPU cores and GPUs") == "cpu-cores-and-gpus"


def test_readme_leads_with_setup_then_tour_then_contents():
    level2 = [text for level, text in _headings(README) if level == 2]
    assert level2[:3] == ["Set up", "A five-minute tour", "Contents"], level2[:4]
    setup = _sections(README)["Set up"]
    commands = re.findall(r"```bash\n(.*?)\n```", setup, flags=re.S)
    assert len(commands) == 2, commands  # one to install and score, one to install and test
    assert commands[0].endswith("pip install . && fastuq score --sample")
    assert commands[1].endswith('pip install ".[test]" && ruff check . && pytest')


def test_tour_walks_score_eval_replay_import_and_python():
    tour = _sections(README)["A five-minute tour"]
    bash = "\n".join(re.findall(r"```bash\n(.*?)\n```", tour, flags=re.S))
    for command in ("fastuq eval", "fastuq replay", "fastuq import"):
        assert command in bash, command
    python = re.findall(r"```python\n(.*?)\n```", tour, flags=re.S)
    assert len(python) == 1 and len(python[0].splitlines()) <= 6, python


def test_contents_links_every_section_and_every_link_lands():
    sections = list(_sections(README))
    contents = _sections(README)["Contents"]
    linked = set(re.findall(r"\]\(#([^)]+)\)", contents))
    after = sections[sections.index("Contents") + 1:]
    assert after, "no reference sections after the contents"
    for heading in after:
        assert _slug(heading) in linked, f"the contents do not link to '## {heading}'"
    anchors = _anchors(README)
    text = "\n".join(_prose_lines(README))
    for target in re.findall(r"\]\(#([^)]+)\)", text):
        assert target in anchors, f"README.md links to #{target}, which no heading makes"
    bench = _anchors(BENCH_README)
    for target in re.findall(r"\]\(bench/README\.md#([^)]+)\)", text):
        assert target in bench, f"README.md links to bench/README.md#{target}: no such heading"


def test_no_internal_issue_numbers():
    for path in (README, BENCH_README):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert not re.search(r"issue[\s_-]*#?\d", line, flags=re.I), (
                f"{path.name}:{number}: names an issue number: {line.strip()}")
            assert not re.search(r"(?<![\w&/])#\d+\b", line), (
                f"{path.name}:{number}: names a #number: {line.strip()}")


def _options_of(command: str) -> set[str]:
    """The option strings of ``fastuq COMMAND``, read from its ``--help`` (the invocation
    column of the options list: what argparse accepts, not options named in the help texts)."""
    import contextlib
    import io

    from fastuq.cli import build_parser

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        build_parser().parse_args([command, "--help"])
    options = set()
    for line in out.getvalue().splitlines():
        m = re.match(r"^  (-\S.*?)(?:\s{2,}|$)", line)
        if m:
            options.update(re.findall(r"(?:^|, )(--?[\w-]+)", m.group(1)))
    return options - {"-h", "--help"}


COMMANDS = ("score", "import", "eval", "select", "sweep", "fit", "gate", "calibrate", "replay",
            "report", "bench", "pack")


def test_options_table_lists_every_option_of_every_command():
    """Each option a command accepts has a row of "Options of every command" that names the
    command, and each row names only commands that accept its options."""
    section = README.read_text(encoding="utf-8").split("### Options of every command", 1)[1]
    section = section.split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        names = re.findall(r"`(--?[\w-]+)", cells[0])
        takers = set(re.findall(r"\b[a-z]+\b", cells[1].split("(")[0]))
        for name in names:
            assert name not in rows, f"{name} has two rows"
            rows[name] = takers
    assert len(rows) > 50, rows
    accepted = {command: _options_of(command) for command in COMMANDS}
    assert "--no-recover" in accepted["import"] and "--higher-passes" in accepted["gate"]
    for command, options in accepted.items():
        for option in options:
            assert option in rows, f"fastuq {command} {option}: no row in the options table"
            assert command in rows[option], f"{option}'s row does not name {command}"
    for option, takers in rows.items():
        for command in takers & set(COMMANDS):
            assert option in accepted[command], f"fastuq {command} has no option {option}"
        assert takers & set(COMMANDS), f"{option}: its row names no command"
