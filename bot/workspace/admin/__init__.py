"""The /agent-limits command."""
