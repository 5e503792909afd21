"""The `bytesup` command line: the app, what its commands share, and the report commands. The top layer."""
