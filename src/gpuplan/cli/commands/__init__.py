"""One module per command: each parses its flags, calls the library once and renders the answer."""
