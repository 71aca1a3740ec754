"""The documentation site builds with ``mkdocs build --strict`` (mkdocs, mkdocs-material and mkdocs-click are
in the ``dev`` extra): no broken link or anchor, every page in the nav, the CLI reference generated and reading
as ``bertprep COMMAND --help`` reads; and no page spells an option the CLI hides."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.cli.options import AliasedOption

REPO_ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (
    "build-vocab",
    "make-shards",
    "inspect",
    "train",
    "finetune",
    "export",
    "predict",
    "fill-mask",
    "extract-features",
    "plot",
    "evaluate",
)
#: The pages of the site and the README: they must use the options' current names.
DOC_PAGES = [
    REPO_ROOT / "README.md",
    *sorted((REPO_ROOT / "docs").glob("*.md")),
    *sorted((REPO_ROOT / "benchmarks").glob("*.md")),
]
#: The one page that names the earlier spellings, in its table of them.
ALIAS_TABLE_PAGE = REPO_ROOT / "docs" / "cli.md"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once for this module with ``mkdocs build --strict`` (offline: nothing is fetched)."""
    site = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    return site


@pytest.mark.slow  # ~13 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_mkdocs_build_strict(site: Path) -> None:
    """The site builds with mkdocs --strict: no broken link, no missing page, the CLI reference generated."""
    cli_page = (site / "cli" / "index.html").read_text(encoding="utf-8")
    for command in COMMANDS:
        assert f'id="bertprep-{command}"' in cli_page, f"the CLI reference lacks bertprep {command}"
    # The benchmark result pages are served from benchmarks/, with their figure.
    assert (site / "benchmarks" / "pretraining_cpu_study" / "index.html").exists()
    assert (site / "benchmarks" / "pretraining_cpu_curves.png").exists()


def _squeeze(text: str) -> str:
    """Text without whitespace: click wraps to the terminal (and breaks after hyphens); the words stay."""
    return re.sub(r"\s+", "", text)


def _section_text(page: str, command: str) -> str:
    """The text of ``bertprep COMMAND``'s section of the built CLI page (tags removed, entities decoded)."""
    start = page.index(f'id="bertprep-{command}"')
    end = page.find("<h3", start)
    return html.unescape(re.sub(r"<[^>]+>", "", page[start : end if end != -1 else len(page)]))


def _command(name: str) -> tuple[click.Command, click.Context]:
    group_ctx = click.Context(cli, info_name="bertprep")
    command = cli.get_command(group_ctx, name)
    return command, click.Context(command, info_name=name, parent=group_ctx, **command.context_settings)


@pytest.mark.parametrize("command_name", COMMANDS)
def test_cli_reference_is_the_help_text(site: Path, command_name: str) -> None:
    """Each option's names, help, default and [required] appear on the built page as `--help` prints them;
    so do the usage line and the description (examples line by line); nothing hidden, no Sentinel.UNSET."""
    page = (site / "cli" / "index.html").read_text(encoding="utf-8")
    section = _section_text(page, command_name)
    squeezed = _squeeze(section)
    help_text = CliRunner().invoke(cli, [command_name, "--help"], terminal_width=80).output
    command, ctx = _command(command_name)
    usage = " ".join(command.collect_usage_pieces(ctx))
    assert _squeeze(f"bertprep {command_name} {usage}") in squeezed
    for line in command.help.split("\n"):  # the description: every line, the \b examples verbatim
        if line.strip() and line.strip() != "\b":
            assert _squeeze(line) in squeezed, line
    options = [p for p in command.get_params(ctx) if isinstance(p, click.Option) and not p.hidden]
    for option in options:
        names, option_help = option.get_help_record(ctx)
        assert _squeeze(names) in _squeeze(help_text) and _squeeze(option_help) in _squeeze(help_text)
        assert _squeeze(names) in squeezed, (command_name, names)
        assert _squeeze(option_help) in squeezed, (command_name, names, option_help)
        if option.required:
            assert "[required]" in option_help
        for alias in getattr(option, "aliases", ()):
            assert not re.search(rf"{re.escape(alias)}(?![\w-])", section), (command_name, alias)
    assert "Sentinel" not in section and "UNSET" not in section
    assert "<em>" not in page[page.index(f'id="bertprep-{command_name}"') :].split("<h3", 1)[0]  # no globs as italics


def _hidden_aliases() -> dict[str, list[str]]:
    """Every hidden spelling of an option (``AliasedOption.aliases``) -> the commands that take it."""
    aliases: dict[str, list[str]] = {}
    for name in cli.list_commands(click.Context(cli)):
        command, ctx = _command(name)
        for param in command.get_params(ctx):
            if isinstance(param, AliasedOption):
                for alias in param.aliases:
                    aliases.setdefault(alias, []).append(name)
    return aliases


def test_docs_use_no_hidden_option_spelling() -> None:
    """README, docs and benchmark pages spell options as `--help` does (the hidden aliases only in cli.md's
    table of earlier spellings)."""
    aliases = _hidden_aliases()
    assert "--init-from" in aliases and "--input-file" in aliases  # the test sees the aliases it must
    found = []
    for page in DOC_PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if page == ALIAS_TABLE_PAGE and line.startswith("| `"):
                continue
            for alias in aliases:
                if re.search(rf"(?<![\w-]){re.escape(alias)}(?![\w-])", line):
                    found.append(f"{page.relative_to(REPO_ROOT)}:{number}: {alias} (now {_current_name(alias)})")
    assert not found, "hidden option spellings in the docs:\n" + "\n".join(found)


def _current_name(alias: str) -> str:
    for name in cli.list_commands(click.Context(cli)):
        command, ctx = _command(name)
        for param in command.get_params(ctx):
            if alias in getattr(param, "aliases", ()):
                return ", ".join(param.opts)
    return "?"
