"""What a process that will run the engine can load ahead, before it forks the processes that run it.

The engine imports the ``openai`` client's library when it builds its LLM client (a process that makes no LLM call
skips a second of imports) and loads the model's tokenizer tables when it builds its token counter; a server that
forks its workers from one parent (``python -m bot``'s supervisor) loads both once, there, and every worker shares
them.
"""

from __future__ import annotations

from agent_core.tokens import counter_for


def preload_engine(model: str, tokenizer: str = "auto") -> None:
    """Import the LLM client's library and load ``model``'s tokenizer tables (``OPENAI_TOKENIZER``), once."""
    import openai  # noqa: F401  (agent_core.llm imports it here too: then a lookup)

    counter_for(model, tokenizer)  # its tables stay cached (_load_encoding) for every later counter
