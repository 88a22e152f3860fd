"""Scripted models for the fake endpoint: ``scripted-good`` replays each case's recorded good trajectory,
``scripted-bad`` its bad one. They answer over HTTP (``tests/fakes/openai_server.py``), so a run goes through
the real client, loop and pipeline; each judge is then shown to pass the good and fail the bad.

A request is matched to its case and turn by what the person said (the last user message holding a turn's
words); the step is the number of assistant messages since. Placeholders in arguments are filled as the
harness filled the case's data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evalkit.cases import Case, Step
from tests.fakes.openai_server import RecordedRequest, Reply, error, refusal, text, tool_calls

GOOD, BAD = "scripted-good", "scripted-bad"
#: Both, priced in ``AGENT_MODELS`` as a small hosted model would be (USD per 1M prompt/completion tokens).
SCRIPTED_MODELS = (f"{GOOD}:0.15/0.60", f"{BAD}:0.15/0.60")

Fill = Callable[[Case, Any], Any]


class ScriptedModels:
    """The fake endpoint's script: one function from a request to the reply of the model it names."""

    def __init__(self, cases: list[Case], fill: Fill) -> None:
        self.fill = fill
        #: (the person's words as sent, case, turn index), longest words first: the most specific match wins.
        self.turns = sorted(((str(fill(c, t.say)), c, i) for c in cases for i, t in enumerate(c.turns)),
                            key=lambda item: -len(item[0]))

    def __call__(self, request: RecordedRequest) -> Reply:
        trajectory = {GOOD: "good", BAD: "bad"}.get(request.model or "")
        if trajectory is None:
            return error(404, f"The model {request.model!r} does not exist here: scripted-good or scripted-bad.")
        found = self._locate(request.messages)
        if found is None:
            return error(400, "scripted model: no case's words in this conversation")
        case, turn, step = found
        steps: list[Step] = getattr(case, trajectory)[turn]
        chosen = steps[min(step, len(steps) - 1)]
        usage = chosen.get("usage") or {}
        prompt, completion = usage.get("prompt"), usage.get("completion")
        if "refuse" in chosen:
            return refusal(str(chosen["refuse"]), prompt_tokens=prompt, completion_tokens=completion)
        if "answer" in chosen:
            return text(str(self.fill(case, chosen["answer"])), prompt_tokens=prompt, completion_tokens=completion)
        calls = [(name, dict(self.fill(case, args or {}))) for name, args in chosen["call"].items()]
        return tool_calls(*calls, prompt_tokens=prompt, completion_tokens=completion)

    def _locate(self, messages: list[dict[str, Any]]) -> tuple[Case, int, int] | None:
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if message.get("role") != "user":
                continue
            content = _text(message.get("content"))
            for words, case, turn in self.turns:
                if words in content:
                    after = sum(1 for m in messages[index + 1:] if m.get("role") == "assistant")
                    return case, turn, after
        return None


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")
