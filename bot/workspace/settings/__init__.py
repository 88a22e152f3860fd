"""A workspace's stored settings."""
