"""A turn's stored shape: turns queued by an earlier version are read after a deploy, and written the same way."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from bot.identity import Conversation, Workspace
from bot.turn import FileRef, Target, Turn

# Byte for byte what the version before the conversation value wrote into a thread's ``turns`` hash.
STORED = (
    '{"thread": "E0001/T0001/C1/1700000000.000100", "turn_id": "1700000000.000200", "text": "ünïcode \\"q\\"", '
    '"user_id": "U1", "team_id": "T0001", "enterprise_id": "E0001", "channel_id": "C1", '
    '"reply_thread_ts": "1700000000.000100", "message_ts": "1700000000.000200"}'
)
STORED_ORG_DM = (
    '{"thread": "E0001/-/D1/dm", "turn_id": "1.2", "text": "hi", "user_id": "U1", "team_id": "-", '
    '"enterprise_id": "E0001", "channel_id": "D1", "reply_thread_ts": "1.1", "message_ts": "1.2"}'
)


def test_a_turn_stored_by_the_previous_version_is_read_and_written_back_the_same() -> None:
    turn = Turn.from_json(STORED.encode())
    conversation = Conversation(Workspace("T0001", "E0001"), "C1", "1700000000.000100")
    assert turn == Turn(conversation, turn_id="1700000000.000200", text='ünïcode "q"', user_id="U1",
                        reply_thread_ts="1700000000.000100", message_ts="1700000000.000200")
    assert turn.thread == conversation.id and turn.workspace == conversation.workspace
    assert turn.target == Target(conversation, "1700000000.000100", "1700000000.000200")
    assert turn.target.channel_id == "C1"
    assert turn.to_json() == STORED

    dm = Turn.from_json(STORED_ORG_DM)  # an org-wide install's request without a team: the enterprise's own
    assert dm.workspace == Workspace.of(None, "E0001") and dm.conversation.thread_ts == "dm"
    assert dm.to_json() == STORED_ORG_DM


@pytest.mark.parametrize("raw", [
    "{not json", "[]", STORED.replace('"thread": "E0001/T0001/C1/1700000000.000100", ', ""),
    STORED.replace('"user_id": "U1"', '"user_id": 1'), STORED.replace("E0001/T0001/C1/", "T0001/C1/"),
])
def test_a_record_this_code_did_not_write_is_refused(raw: str) -> None:
    # ThreadQueue drops such a record (ValueError or TypeError) rather than leave it blocking its thread.
    with pytest.raises((ValueError, TypeError)):
        Turn.from_json(raw)


def test_a_turn_with_files_stores_them_and_one_without_keeps_the_old_shape() -> None:
    base = Turn.from_json(STORED)
    png = FileRef("F1", "chart.png", "image/png", 1234, "https://files.slack.com/files-pri/T1-F1/chart.png", "T0001")
    stub = FileRef("F2", stub=True)
    turn = replace(base, files=(png, stub))
    raw = turn.to_json()
    assert json.loads(raw)["files"] == [
        {"id": "F1", "name": "chart.png", "mimetype": "image/png", "size": 1234,
         "url": "https://files.slack.com/files-pri/T1-F1/chart.png", "team": "T0001"},
        {"id": "F2", "name": "", "mimetype": "", "size": 0, "url": "", "team": "", "stub": True},
    ]
    assert Turn.from_json(raw) == turn
    assert replace(turn, files=()).to_json() == STORED  # no files: byte for byte the previous version's record
    # The previous version reads only the fields it knows: the new record is still a valid turn for it.
    assert {k: v for k, v in json.loads(raw).items() if k != "files"} == json.loads(STORED)


@pytest.mark.parametrize("files", ['"F1"', '[{"name": "x"}]', '[{"id": "F1", "size": "big"}]', "[1]"])
def test_a_files_record_this_code_did_not_write_is_refused(files: str) -> None:
    with pytest.raises((ValueError, TypeError)):
        Turn.from_json(STORED[:-1] + f', "files": {files}}}')


def test_a_file_is_read_from_the_event_as_slack_sends_it() -> None:
    assert FileRef.of_event({
        "id": "F1", "name": "a.pdf", "mimetype": "application/pdf", "size": 10, "url_private": "u",
        "url_private_download": "u?d=1", "user_team": "T1", "source_team": "T2",
    }) == FileRef("F1", "a.pdf", "application/pdf", 10, "u?d=1", "T1")
    assert FileRef.of_event({"id": "F2", "file_access": "check_file_info"}) == FileRef("F2", stub=True)
    assert FileRef.of_event({"id": "F3", "size": True, "name": 5}) == FileRef("F3")
    assert FileRef.of_event({"name": "no id"}) is None and FileRef.of_event("F1") is None


def test_an_action_token_is_stored_only_when_the_event_carried_one() -> None:
    base = Turn.from_json(STORED)
    assert base.action_token == "" and "action_token" not in json.loads(base.to_json())
    with_token = replace(base, action_token="12345.98765.abcd")
    raw = with_token.to_json()
    assert json.loads(raw)["action_token"] == "12345.98765.abcd"
    assert Turn.from_json(raw) == with_token
    with pytest.raises(TypeError):
        Turn.from_json(STORED.replace('"message_ts"', '"action_token": 7, "message_ts"'))


def test_a_trace_context_is_stored_only_when_tracing_gave_one_and_older_records_read_as_none() -> None:
    base = Turn.from_json(STORED)
    assert base.traceparent == "" and base.to_json() == STORED  # tracing off: the previous version's bytes
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    traced = replace(base, traceparent=parent)
    raw = traced.to_json()
    assert json.loads(raw)["traceparent"] == parent
    assert Turn.from_json(raw) == traced
    # The previous version reads only the fields it knows, so a traced record is its same turn.
    assert {k: v for k, v in json.loads(raw).items() if k != "traceparent"} == json.loads(STORED)
    with pytest.raises(TypeError):
        Turn.from_json(STORED.replace('"message_ts"', '"traceparent": 7, "message_ts"'))
