def main() -> None:
    """Run the CLI."""
