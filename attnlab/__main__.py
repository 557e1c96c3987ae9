"""``python -m attnlab ARGS``: the ``attnlab`` command where its script is not on PATH (a Windows or
user install, a notebook's ``!python -m attnlab``)."""
from attnlab.commands.cli import console_main

if __name__ == "__main__":
    console_main()
