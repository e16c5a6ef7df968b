"""``python -m ligerkit``."""

from ligerkit.cli import main

main()
