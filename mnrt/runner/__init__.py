"""The `mnrt` command line."""
