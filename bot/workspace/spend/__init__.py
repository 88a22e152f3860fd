"""What a workspace spends."""
