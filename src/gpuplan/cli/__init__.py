"""The command line: parse, call the library once, render. The library never imports this."""
