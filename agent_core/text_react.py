"""Text ReAct protocol (Thought / Action / Action Input / Final Answer) for models without tool calling."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

PROTOCOL_TEXT = """\
## How to answer
You cannot call tools natively. Write exactly one of these two forms, and nothing else:

Thought: <one line: why the next action>
Action: <tool name>
Action Input: <the tool's arguments as one JSON object>

or, when you know the answer:

Thought: <one line>
Final Answer: <your answer>

After an Action, stop writing: the tool's result comes back as an Observation."""

_THOUGHT = re.compile(r"^\s*Thought\s*:\s*(?P<text>.*?)(?=^\s*(?:Action|Final Answer)\s*:|\Z)", re.S | re.M | re.I)
_ACTION = re.compile(r"^\s*Action\s*:\s*(?P<name>[^\n]+?)\s*$", re.M | re.I)
_INPUT = re.compile(r"^\s*Action\s*Input\s*:\s*(?P<input>.*)", re.S | re.M | re.I)
_FINAL = re.compile(r"^\s*Final\s*Answer\s*:\s*(?P<answer>.*)", re.S | re.M | re.I)


@dataclass(frozen=True, slots=True)
class ReactAction:
    thought: str | None
    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ReactFinal:
    thought: str | None
    answer: str


@dataclass(frozen=True, slots=True)
class ReactFormatError:
    """What to tell the model so it can fix its reply."""

    thought: str | None
    message: str


ReactStep = ReactAction | ReactFinal | ReactFormatError


def _first_json_object(text: str) -> dict[str, Any] | None:
    start = text.find("{")
    if start < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def parse(reply: str) -> ReactStep:
    """Read one reply. A malformed one becomes a :class:`ReactFormatError`, never an exception."""
    match = _THOUGHT.search(reply)
    thought = match.group("text").strip() or None if match else None
    final = _FINAL.search(reply)
    action = _ACTION.search(reply)
    if final and (not action or final.start() < action.start()):
        answer = final.group("answer").strip()
        if answer:
            return ReactFinal(thought, answer)
        return ReactFormatError(thought, "`Final Answer:` was empty. Write the answer after it.")
    if not action:
        return ReactFormatError(
            thought, "Your reply had neither `Action:` nor `Final Answer:`. Use exactly one of the two forms."
        )
    raw_input = _INPUT.search(reply, action.end())
    if not raw_input:
        return ReactFormatError(thought, "`Action:` must be followed by `Action Input:` with a JSON object.")
    arguments = _first_json_object(raw_input.group("input"))
    if arguments is None:
        return ReactFormatError(thought, "`Action Input:` must be one JSON object, e.g. {\"expression\": \"2+2\"}.")
    return ReactAction(thought, action.group("name").strip().strip("`"), arguments)


def format_error_message(error: ReactFormatError) -> dict[str, Any]:
    return {"role": "user", "content": f"Format error: {error.message}"}


def observation_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": f"Observation: {text}"}
