"""dex-agents."""
