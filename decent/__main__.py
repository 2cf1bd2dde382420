from decent.tools.cli import entry

entry()
