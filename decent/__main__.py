from decent.platform.cli import entry

entry()
