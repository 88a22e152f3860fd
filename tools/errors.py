"""The tool package's exceptions; what each one means to the caller.

::

    ToolError                  a tool could not do what it was asked; the executor turns it into an
    |                          ``error`` observation ("CalculatorError: ...") and the run goes on
    +-- CalculatorError        the expression is not allowed or would exceed a bound
    +-- UnknownTimezoneError   not an IANA zone name (the message carries suggestions)
    +-- NotInSlackError        a Slack-only tool ran where there is no Slack conversation
    +-- FetchError             fetch_url could not read the page (HTTP status, content type, size)
    |   +-- BlockedURLError    the URL, or a redirect hop, points somewhere fetch_url must not go
    +-- SearchError            the search backend failed or answered something unreadable
    +-- FileUnreadable         a file given to the run cannot be read (broken, hostile, wrong type, too slow)
    +-- ConnectionNeeded       an ``"auth": "user"`` MCP server's tool, and the asker has not connected to it

    ToolDefinitionError        (a TypeError) a programmer mistake in a @tool definition; raised at
                               import or start-up, never during a run

Model mistakes (unknown tool, bad arguments) are not exceptions at all: ``Executor.prepare`` returns
them as ``ToolResult`` values.
"""

from __future__ import annotations


class ToolError(Exception):
    """A tool could not do what it was asked; the message is written for the model and the user."""


class CalculatorError(ToolError):
    """The expression is not allowed, is malformed, or would exceed a size or time bound."""


class UnknownTimezoneError(ToolError):
    """The zone name is not an IANA time zone."""


class NotInSlackError(ToolError):
    """A tool that reads Slack ran without a Slack conversation (for instance in the terminal)."""


class FetchError(ToolError):
    """fetch_url could not read the page."""


class BlockedURLError(FetchError):
    """The URL or one of its redirect hops is refused (scheme, credentials, or a non-public address)."""


class SearchError(ToolError):
    """The web search backend failed or answered something that is not a result list."""


class FileUnreadable(ToolError):
    """A file cannot be read: damaged, encrypted, not what its type says, a zip or decompression bomb, or too
    slow to read; the message says which, for the user."""


class ConnectionNeeded(ToolError):
    """The tool acts as the person asking, who has not connected (signed in to) its server; they were offered to."""


class ToolDefinitionError(TypeError):
    """A ``@tool`` function or ``Tool`` value is malformed (a programmer mistake, found at start-up)."""
