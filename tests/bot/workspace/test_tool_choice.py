"""The workspace's tool rules, the ``tools`` grammar and the views of the list: pure, no Slack, no Redis."""

from __future__ import annotations

import json

import pytest

from bot.receive.views.home import tools_blocks
from bot.runs.toolbox import Toolbox
from bot.workspace.admin import NO_CATALOG_NOTE, ToolRuleCommand, ToolsCommand, UsageError, format_tools, parse_command
from bot.workspace.settings import CatalogEntry, ToolChoice, unknown_pattern
from bot.workspace.settings.tool_choice import decode_catalog, encode_catalog, rows
from tests.bot.conftest import make_settings
from tests.fakes.slack_api import FakeSlack
from tools import ToolListing, builtin_registry

CATALOG = [
    CatalogEntry("calculator", None, "Evaluate an arithmetic expression."),
    CatalogEntry("time__get_current_time", "time", "Get current time in a specific timezone"),
    CatalogEntry("time__convert_time", "time", "Convert time between timezones"),
    CatalogEntry("docs__search", "docs", "Search the docs"),
]
NAMES = [e.name for e in CATALOG]


def test_no_rule_means_every_deployment_tool_is_on() -> None:
    assert ToolChoice().disabled(NAMES) == []


def test_the_most_specific_rule_wins() -> None:
    choice = ToolChoice().with_rule("time__*", False).with_rule("time__get_current_time", True)
    assert choice.disabled(NAMES) == ["time__convert_time"]
    assert choice.state("time__*", NAMES) == "mixed"


def test_a_server_rule_replaces_the_rules_of_its_tools() -> None:
    choice = ToolChoice().with_rule("time__*", False).with_rule("time__get_current_time", True)
    assert choice.with_rule("time__*", False).disabled(NAMES) == ["time__get_current_time", "time__convert_time"]
    assert choice.with_rule("time__*", True).rules == {}  # back to the default: nothing stored


def test_rules_that_say_what_holds_anyway_are_not_kept() -> None:
    assert ToolChoice().with_rule("calculator", True).rules == {}
    off = ToolChoice().with_rule("calculator", False)
    assert off.rules == {"calculator": False}
    assert off.with_rule("calculator", True).rules == {}
    assert ToolChoice({"time__*": False}).with_rule("time__convert_time", False).rules == {"time__*": False}


def test_a_server_prefix_does_not_cover_a_longer_server_name() -> None:
    choice = ToolChoice({"time__*": False})
    assert choice.is_on("timer__start") and not choice.is_on("time__convert_time")


def test_unknown_names_get_close_matches_and_known_servers_are_known() -> None:
    assert unknown_pattern("time__*", CATALOG) is None
    assert unknown_pattern("calculator", CATALOG) is None
    assert (unknown_pattern("time__get_curent_time", CATALOG) or [""])[0] == "time__get_current_time"
    assert unknown_pattern("tme__*", CATALOG) == ["time__*"]
    assert unknown_pattern("zzz", CATALOG) == []


def test_the_catalog_round_trips_through_its_stored_form() -> None:
    assert decode_catalog(encode_catalog(CATALOG)) == CATALOG
    with pytest.raises((ValueError, KeyError, TypeError)):
        decode_catalog(json.dumps({"nope": 1}))


@pytest.mark.parametrize(("text", "parsed"), [
    ("tools", ToolsCommand()),
    ("TOOLS", ToolsCommand()),
    ("tools enable time__get_current_time", ToolRuleCommand("time__get_current_time", True)),
    ("tools disable time__*", ToolRuleCommand("time__*", False)),
    ("tools Disable calculator", ToolRuleCommand("calculator", False)),
])
def test_tools_commands_parse(text: str, parsed: object) -> None:
    assert parse_command(text) == parsed


@pytest.mark.parametrize(("text", "problem"), [
    ("tools enable", "`tools` takes nothing"),
    ("tools enable a b", "`tools` takes nothing"),
    ("tools remove calculator", "`tools` takes nothing"),
    ("tools disable *", "is not a tool name"),
    ("tools disable time.now", "is not a tool name"),
    ("tools disable <!channel>", "is not a tool name"),
])
def test_bad_tools_commands_say_what_is_wrong(text: str, problem: str) -> None:
    result = parse_command(text)
    assert isinstance(result, UsageError) and problem in result.text
    assert "<!channel>" not in result.text


def test_the_list_marks_each_tool_with_its_server_and_state() -> None:
    listed = rows(CATALOG, ToolChoice({"time__*": False}))
    text = format_tools(listed, published=True, can_change=False)
    assert text.splitlines()[0] == "*Tools for this workspace* (2 of 4 on)"
    assert ":white_check_mark: `calculator` (built-in) Evaluate an arithmetic expression." in text
    assert ":no_entry_sign: `time__convert_time` (time) Convert time between timezones" in text
    assert "Only workspace admins and owners can change these." in text
    assert NO_CATALOG_NOTE in format_tools(listed, published=False, can_change=True)


def test_a_servers_summary_cannot_ping_or_format() -> None:
    hostile = [ToolListing("evil__x", "evil", "<!channel> `code` & <https://x|y>", True)]
    text = format_tools(hostile, published=True, can_change=True)
    assert "<!channel>" not in text and "<https" not in text


def test_home_tools_section_lists_every_tool_within_slack_limits() -> None:
    many = [ToolListing(f"srv__tool_{i}", "srv", "x" * 150, i % 2 == 0) for i in range(80)]
    blocks = tools_blocks(many, published=True, is_admin=True)
    assert blocks[1]["text"]["text"] == "Tools (40 of 80 on)"
    sections = [b for b in blocks if b["type"] == "section"]
    assert all(len(b["text"]["text"]) <= 3000 for b in sections)
    shown = "\n".join(b["text"]["text"] for b in sections)
    assert "`srv__tool_0` (srv)" in shown and "20 more" in shown
    assert "tools enable|disable" in json.dumps(blocks[-1])


def test_home_tools_section_notes_a_missing_catalog_and_hides_the_hint_from_members() -> None:
    blocks = tools_blocks(rows(CATALOG[:1], ToolChoice()), published=False, is_admin=False)
    text = json.dumps(blocks)
    assert ":white_check_mark: `calculator` (built-in)" in text
    assert "No worker has published" in text and "tools enable" not in text


async def test_a_typo_in_agent_tools_is_warned_at_start_up(
    caplog: pytest.LogCaptureFixture, key_prefix: str, fake_slack: FakeSlack
) -> None:
    settings = make_settings(key_prefix, fake_slack, None, agent_tools="calculator,calcluator")
    toolbox = Toolbox.from_settings(settings, base=builtin_registry(settings))
    await toolbox.start()
    await toolbox.aclose()
    assert "AGENT_TOOLS names tools that do not exist (typos?): calcluator" in caplog.text
